"""The pure parts of ``rlmesh stack``: deciding 'blocked', grouping identical processes,
and the human report. No processes, no sockets."""

from __future__ import annotations

import json
from typing import Any

from rlmesh.cli import stack
from rlmesh.runtime.run_dir import ProcessRecord, RunDir

LOOP_MAIN = [
    {"file": "bootstrap.py", "line": 72, "func": "main", "code": "uvloop.run(coro)"},
    {"file": "runners.py", "line": 118, "func": "run", "code": "return self._loop.run_until_complete(task)"},
]
BLOCKED_MAIN = LOOP_MAIN + [
    {"file": "actor.py", "line": 192, "func": "_start", "code": "return fn(*args, **kwargs)"},
    {"file": "envs.py", "line": 9, "func": "step", "code": "time.sleep(5)"},
]
MONITOR_TASK = {"name": "rlmesh.loop_monitor", "coro": "LoopMonitor._run", "done": False,
                "stack": [{"file": "diagnostics.py", "line": 43, "func": "_run",
                           "code": "await asyncio.sleep(TICK_S)"}]}


def loop(since: float = 0.05, blocked: bool = False, running: bool = True) -> dict[str, Any]:
    return {"loop_running": running, "since_last_tick_s": since, "blocked": blocked,
            "lag_mean_s": 0.0004, "lag_max_s": 0.003}


def report(name: str, pid: int, role: str = "Runner", main=LOOP_MAIN, tasks=None,
           lp=None, probes=None) -> dict[str, Any]:
    return {
        "name": name, "role": role, "pid": pid, "loop": lp or loop(),
        "probes": probes if probes is not None else {"server": {"tasks": 0, "stream_backlog": 0}},
        "threads": [
            {"name": "rlmesh.control", "ident": 1, "daemon": True, "stack": [
                {"file": "control.py", "line": 82, "func": "answer", "code": "report()"}]},
            {"name": "MainThread", "ident": 2, "daemon": False, "stack": main},
        ],
        "tasks": tasks if tasks is not None else [dict(MONITOR_TASK, name=f"Task-{pid}")],
    }


def record(name: str, pid: int, role: str = "Runner") -> ProcessRecord:
    return ProcessRecord(name=name, role=role, pid=pid, create_time=1.0,
                         control=f"ipc:///tmp/x/{name}.ctl", job="0101-000000-abcd")


def entry(name: str, pid: int, role: str = "Runner", now: float = 100.0, **kw: Any) -> dict[str, Any]:
    return stack.make_entry(record(name, pid, role), report(name, pid, role, **kw), None, now)


def silent(name: str, pid: int, role: str = "Runner", dump: str = "") -> dict[str, Any]:
    fallback = {"reason": stack.UNRESPONSIVE, "faulthandler": dump or None,
                "faulthandler_file": f"/run/stacks/{name}.{pid}.txt", "py_spy": None, "notes": []}
    return stack.make_entry(record(name, pid, role), None, fallback, 100.0)


# --- deciding 'blocked' ---

def test_a_loop_that_ticks_is_not_blocked():
    assert stack.blocked_for(loop(since=0.08)) is None


def test_a_loop_silent_past_the_threshold_is_blocked_for_that_long():
    assert stack.blocked_for(loop(since=3.2)) == 3.2
    # The process's own verdict counts even if the gap looks short here.
    assert stack.blocked_for(loop(since=0.5, blocked=True)) == 0.5


def test_a_loop_that_is_not_running_is_not_called_blocked():
    assert stack.blocked_for(loop(since=30.0, running=False)) is None
    assert stack.blocked_for({}) is None


def test_entry_keeps_the_raw_report_and_adds_the_verdicts():
    e = entry("r0", 10, lp=loop(since=2.5))
    assert e["threads"][1]["stack"] == LOOP_MAIN and e["probes"]["server"]["tasks"] == 0
    assert (e["blocked"], e["blocked_for_s"], e["responded"], e["fallback"]) == (True, 2.5, True, None)
    assert e["job"] == "0101-000000-abcd"
    json.dumps(e)  # --json prints it as is


def test_a_silent_process_has_no_verdict_on_its_loop_and_keeps_its_fallback():
    e = silent("r0", 10, dump="Current thread 0x1 (most recent call first):\n  File \"x.py\", line 3 in spin\n")
    assert (e["responded"], e["blocked"], e["name"], e["role"]) == (False, None, "r0", "Runner")
    assert "spin" in e["fallback"]["faulthandler"]


def test_in_flight_calls_get_ages_from_either_stamp():
    probes = {"server": {"in_flight": [{"method": "step", "since": 97.5}]},
              "actor:a": {"in_flight": [{"method": "learn", "age_s": 0.25}]},
              "handles": {"a": {"pending_calls": 1}}}
    calls = stack.in_flight_calls(probes, now=100.0)
    assert calls == [{"probe": "server", "method": "step", "age_s": 2.5},
                     {"probe": "actor:a", "method": "learn", "age_s": 0.25}]


# --- grouping ---

def test_identical_processes_form_one_group_whatever_their_task_names():
    groups = stack.group_entries([entry("r2", 12), entry("r0", 10), entry("r1", 11)])
    assert [[e["name"] for e in g] for g in groups] == [["r0", "r1", "r2"]]


def test_a_different_main_stack_or_task_set_splits_the_group():
    other_task = dict(MONITOR_TASK, coro="Learner._loop")
    entries = [entry("r0", 10), entry("r1", 11, main=BLOCKED_MAIN, lp=loop(since=4.0)),
               entry("r2", 12, tasks=[MONITOR_TASK, other_task]), entry("r3", 13)]
    groups = stack.group_entries(entries)
    assert sorted([e["name"] for e in g] for g in groups) == [["r0", "r3"], ["r1"], ["r2"]]


def test_roles_never_share_a_group_and_the_driver_comes_first():
    entries = [entry("learner", 20, role="Learner"), entry("r0", 10),
               entry("driver", 1, role="driver"), entry("r1", 11)]
    groups = stack.group_entries(entries)
    assert [[e["name"] for e in g] for g in groups] == [["driver"], ["learner"], ["r0", "r1"]]


def test_silent_processes_are_never_merged():
    groups = stack.group_entries([silent("r0", 10), silent("r1", 11)])
    assert len(groups) == 2


# --- the human report ---

def test_identical_processes_print_their_stacks_once():
    text = stack.format_text([entry("r0", 10), entry("r1", 11), entry("r2", 12)])
    assert "3 processes with the same stacks: r0 (pid 10), r1 (pid 11), r2 (pid 12)" in text
    assert text.count("Thread MainThread") == 1
    assert text.count("loop ok") == 3  # but every process gets its own status line
    assert "rlmesh.control" not in text  # busy answering the request: noise
    assert "!!" not in text


def test_a_blocked_loop_is_flagged_with_its_stack_and_calls():
    probes = {"server": {"tasks": 1, "stream_backlog": 0,
                         "in_flight": [{"method": "step", "since": 96.8}]}}
    text = stack.format_text([entry("r0", 10), entry("r1", 11, main=BLOCKED_MAIN,
                                                     lp=loop(since=3.2), probes=probes)])
    assert "rlmesh stack: 2 processes, 1 blocked or unresponsive" in text
    r1 = text.split("r1 (pid 11)", 1)[1]
    assert r1.splitlines()[1] == "  !! event loop blocked for 3.2 s"
    assert "  in flight: step (3.2 s); server: stream_backlog=0 tasks=1" in r1
    assert 'File "envs.py", line 9, in step\n      time.sleep(5)' in r1
    assert "!!" not in text.split("r1 (pid 11)", 1)[0].split("\n", 1)[1]


def test_handles_probe_names_only_the_busy_handles():
    idle = entry("d", 1, role="driver", probes={"handles": {"a": {"pending_calls": 0, "streams": 0}}})
    busy = entry("d", 1, role="driver", probes={"handles": {"a": {"pending_calls": 0, "streams": 0},
                                                            "b": {"pending_calls": 2, "streams": 0}}})
    assert stack.format_probes(idle) == ["handles (1): all idle"]
    assert stack.format_probes(busy) == ["handles (2): b pending_calls=2 streams=0"]
    broken = entry("d", 1, probes={"server": {"error": "KeyError('x')"}})
    assert stack.format_probes(broken) == ["server: probe failed: KeyError('x')"]


def test_an_unresponsive_process_shows_its_faulthandler_dump():
    dump = 'Current thread 0x1 (most recent call first):\n  File "envs.py", line 3 in spin\n'
    text = stack.format_text([silent("r0", 10, dump=dump)])
    assert "!! control thread unresponsive (GIL held?)" in text
    assert "faulthandler dump (SIGUSR2, from /run/stacks/r0.10.txt):" in text
    assert '      File "envs.py", line 3 in spin' in text


# --- the registry, read tolerantly ---

def test_unreadable_or_newer_records_do_not_hide_the_others(tmp_path):
    run_dir = RunDir.create("0101-000000-abcd", root=tmp_path)
    run_dir.write_process(record("good", 10))
    (run_dir.path / "procs" / "broken.json").write_text("{not json")
    newer = dict(record("newer", 11).__dict__, gpu=0)
    (run_dir.path / "procs" / "newer.json").write_text(json.dumps(newer))
    assert [r.name for r in stack.read_records(run_dir)] == ["good", "newer"]

"""``rlmesh stack``: threads, asyncio tasks and loop health of every rlmesh process here.

Processes are found in the run-directory registry and asked for a STACK report by their
control threads, all at once. One whose control thread cannot answer (a thread holding
the GIL) is dumped through faulthandler on SIGUSR2, and through py-spy when installed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil

from ..runtime.diagnostics import BLOCKED_AFTER_S, DUMP_SIGNAL, TICK_S, stopped_state
from ..runtime.run_dir import ProcessRecord, RunDir, all_run_dirs, runs_root

UNRESPONSIVE = "control thread unresponsive (GIL held?)"
DUMP_WAIT_S = 2.0
PY_SPY_TIMEOUT_S = 10.0
REPLY_LIMIT_BYTES = 64 << 20


@dataclasses.dataclass
class Target:
    """A live process found in the registry, and where its faulthandler writes."""

    record: ProcessRecord
    run_dir: RunDir

    @property
    def dump_path(self) -> Path:
        return self.run_dir.stack_dump_path(self.record.name, self.record.pid)


# --- finding processes ---

def read_records(run_dir: RunDir) -> list[ProcessRecord]:
    """The process records of one job; unreadable ones (mid-write, other versions) skipped."""
    known = {f.name for f in dataclasses.fields(ProcessRecord)}
    out = []
    for path in sorted((run_dir.path / "procs").glob("*.json")):
        try:
            data = json.loads(path.read_text())
            out.append(ProcessRecord(**{k: v for k, v in data.items() if k in known}))
        except (OSError, ValueError, TypeError):
            continue
    return out


def find_targets(root: Path, job: str | None = None) -> tuple[list[Target], int]:
    """Live processes under ``root`` (of one job if given), and how many stale records were skipped."""
    targets, stale = [], 0
    for run_dir in all_run_dirs(root):
        if job is not None and run_dir.job_id != job:
            continue
        for rec in read_records(run_dir):
            if rec.is_alive():
                targets.append(Target(rec, run_dir))
            else:
                stale += 1
    return targets, stale


def explain_unknown_pid(pid: int, root: Path) -> str:
    """Why ``pid`` is not a process ``rlmesh stack`` can inspect, in words."""
    try:
        what = f"pid {pid} ({psutil.Process(pid).name()})"
    except psutil.NoSuchProcess:
        return f"pid {pid}: no such process"
    except psutil.AccessDenied:
        what = f"pid {pid}"
    return (f"{what} is not an rlmesh process: no live process record for it under {root} "
            "(for a job elsewhere, pass --root DIR)")


# --- asking processes ---

def ask_all(targets: list[Target], timeout: float) -> tuple[dict[int, tuple[dict[str, Any], float]],
                                                           dict[int, str]]:
    """STACK reports by pid, asked of every control thread at once, each with the local
    monotonic time it arrived; and the refusals (error replies) by pid. Processes that did
    not answer within ``timeout`` are in neither."""
    import zmq

    from ..wire import codec, messages as M
    from ..wire.sockets import connect

    limits = codec.Limits.with_max(REPLY_LIMIT_BYTES)
    ctx = zmq.Context()
    poller = zmq.Poller()
    socks: dict[zmq.Socket, Target] = {}
    replies: dict[int, tuple[dict[str, Any], float]] = {}
    refusals: dict[int, str] = {}
    try:
        for call_id, target in enumerate(targets, 1):
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.MAXMSGSIZE, REPLY_LIMIT_BYTES)
            connect(sock, target.record.control)
            try:
                sock.send_multipart(codec.encode(M.make(M.STACK, id=call_id)), zmq.NOBLOCK)
            except zmq.Again:
                sock.close()
                continue
            socks[sock] = target
            poller.register(sock, zmq.POLLIN)
        deadline = time.monotonic() + timeout
        while poller.sockets and (left := deadline - time.monotonic()) > 0:
            for sock, _ in poller.poll(max(1, int(left * 1000))):
                frames = sock.recv_multipart(copy=False)
                poller.unregister(sock)
                pid = socks[sock].record.pid
                try:
                    msg = M.validate(codec.decode(frames, limits))
                except (codec.DecodeError, M.ProtocolError) as exc:
                    refusals[pid] = f"unreadable reply: {exc}"
                    continue
                if msg["t"] == M.STACK_REPLY:
                    replies[pid] = (msg["report"], time.monotonic())
                else:
                    refusals[pid] = f"{msg.get('etype', msg['t'])}: {msg.get('msg', '')}"
    finally:
        for sock in socks:
            sock.close()
        ctx.term()
    return replies, refusals


def fallback_dump(target: Target, reason: str = UNRESPONSIVE,
                  wait_s: float = DUMP_WAIT_S) -> dict[str, Any]:
    """Stacks of a process whose control thread gave no report: faulthandler, then py-spy."""
    out: dict[str, Any] = {"reason": reason, "faulthandler": None,
                           "faulthandler_file": str(target.dump_path), "py_spy": None, "notes": []}
    path, pid = target.dump_path, target.record.pid
    stopped = stopped_state(pid)
    if stopped is not None:  # it cannot handle the signal: nothing would be written
        out["reason"] = stopped
    elif not path.exists():
        # Without the file we cannot tell that the handler is installed, and SIGUSR2's
        # default action would kill the process.
        out["notes"].append(f"no faulthandler dump file at {path}; not signalling")
    else:
        before = path.stat().st_size
        try:
            os.kill(pid, DUMP_SIGNAL)
        except ProcessLookupError:
            out["notes"].append("the process exited before it could be signalled")
        else:
            text = _read_growth(path, before, wait_s)
            if text:
                out["faulthandler"] = text
            else:
                out["notes"].append(f"no faulthandler dump appeared in {path} within {wait_s} s")
    if shutil.which("py-spy"):
        out["py_spy"] = _py_spy(pid)
    return out


def _read_growth(path: Path, offset: int, wait_s: float) -> str:
    """What gets appended to ``path`` past ``offset`` within ``wait_s`` (until it settles)."""
    deadline = time.monotonic() + wait_s
    size, settled_since = offset, 0.0
    while time.monotonic() < deadline:
        now_size = path.stat().st_size
        if now_size != size:
            size, settled_since = now_size, time.monotonic()
        elif size > offset and time.monotonic() - settled_since > 0.1:
            break
        time.sleep(0.02)
    with open(path, "rb") as fh:
        fh.seek(offset)
        return fh.read(size - offset).decode("utf-8", "replace")


def _py_spy(pid: int) -> str:
    try:
        proc = subprocess.run(["py-spy", "dump", "--pid", str(pid)], capture_output=True,
                              text=True, timeout=PY_SPY_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"(py-spy dump did not finish within {PY_SPY_TIMEOUT_S} s)"
    except OSError as exc:
        return f"(py-spy could not run: {exc})"
    return proc.stdout if proc.returncode == 0 else f"(py-spy failed: {proc.stderr.strip()})"


def collect(targets: list[Target], timeout: float) -> list[dict[str, Any]]:
    """One entry per target: its report, or a fallback dump when it did not answer."""
    replies, refusals = ask_all(targets, timeout)
    silent = [t for t in targets if t.record.pid not in replies]
    reasons = [f"control thread refused the request ({refusals[t.record.pid]})"
               if t.record.pid in refusals else UNRESPONSIVE for t in silent]
    with ThreadPoolExecutor(max_workers=min(16, len(silent) or 1)) as pool:
        dumps = dict(zip((t.record.pid for t in silent), pool.map(fallback_dump, silent, reasons)))
    entries = []
    for t in targets:
        report, received = replies.get(t.record.pid, (None, time.monotonic()))
        entries.append(make_entry(t.record, report, dumps.get(t.record.pid), received))
    return entries


# --- pure decisions ---

def blocked_for(loop: dict[str, Any]) -> float | None:
    """Seconds a running event loop has not ticked, when that counts as blocked; else None."""
    since = loop.get("since_last_tick_s")
    if not loop.get("loop_running") or not isinstance(since, (int, float)):
        return None
    if loop.get("blocked") or since > BLOCKED_AFTER_S + TICK_S:
        return float(since)
    return None


def in_flight_calls(probes: dict[str, Any], now: float) -> list[dict[str, Any]]:
    """Calls being served, from every probe; ``since`` stamps (this machine's monotonic
    clock) become ages."""
    calls = []
    for key, probe in probes.items():
        if not isinstance(probe, dict):
            continue
        for call in probe.get("in_flight") or []:
            age = call.get("age_s")
            if age is None and isinstance(call.get("since"), (int, float)):
                age = round(max(0.0, now - call["since"]), 3)
            calls.append({"probe": key, "method": call.get("method", "?"), "age_s": age})
    return calls


def make_entry(record: ProcessRecord, report: dict[str, Any] | None,
               fallback: dict[str, Any] | None, now: float) -> dict[str, Any]:
    """The JSON form of one process: its raw report plus what ``rlmesh stack`` concluded."""
    entry: dict[str, Any] = dict(report or {})
    entry.update(name=entry.get("name", record.name), role=entry.get("role", record.role),
                 pid=record.pid, job=record.job, control=record.control,
                 responded=report is not None)
    loop = entry.get("loop") if report else None
    since = blocked_for(loop) if isinstance(loop, dict) else None
    entry["blocked"] = None if report is None else since is not None
    entry["blocked_for_s"] = since
    entry["in_flight"] = in_flight_calls(entry.get("probes") or {}, now)
    entry["fallback"] = fallback
    return entry


def _frames_key(stack: list[dict[str, Any]]) -> tuple[tuple[Any, ...], ...]:
    return tuple((f.get("file"), f.get("line"), f.get("func")) for f in stack)


def main_thread(entry: dict[str, Any]) -> dict[str, Any] | None:
    for thread in entry.get("threads") or []:
        if thread.get("name") == "MainThread":
            return thread
    return None


def group_key(entry: dict[str, Any]) -> tuple[Any, ...]:
    """Processes with equal keys print once: same role, main-thread stack and task stacks."""
    if not entry["responded"]:
        return (entry["role"], "silent", entry["pid"])  # nothing to compare: never merged
    main = main_thread(entry)
    tasks = sorted((str(t.get("coro")), _frames_key(t.get("stack") or []))
                   for t in entry.get("tasks") or [])
    return (entry["role"], bool(entry["blocked"]),
            _frames_key(main["stack"]) if main else (), tuple(tasks))


def group_entries(entries: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Groups of identical processes, the driver's role first, then roles and names in order."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for entry in sorted(entries, key=lambda e: (e["name"], e["pid"])):
        groups.setdefault(group_key(entry), []).append(entry)
    return sorted(groups.values(), key=lambda g: (g[0]["role"] != "driver", g[0]["role"], g[0]["name"]))


# --- human output ---

def format_loop(entry: dict[str, Any]) -> str:
    if not entry["responded"]:
        return f"!! {(entry.get('fallback') or {}).get('reason', UNRESPONSIVE)}: no STACK report"
    if entry["blocked"]:
        return f"!! event loop blocked for {entry['blocked_for_s']:.1f} s"
    loop = entry.get("loop") or {}
    if not loop.get("loop_running"):
        return "event loop not running"
    return (f"loop ok: last tick {loop.get('since_last_tick_s', 0):.2f} s ago, lag mean "
            f"{1000 * loop.get('lag_mean_s', 0):.1f} ms, max {1000 * loop.get('lag_max_s', 0):.1f} ms")


def format_probes(entry: dict[str, Any]) -> list[str]:
    """In-flight calls, queue depths and pending handle calls, one line each."""
    lines = []
    if entry["in_flight"]:
        calls = ", ".join(f"{c['method']} ({c['age_s']:.1f} s)" if c["age_s"] is not None
                          else c["method"] for c in entry["in_flight"])
        lines.append(f"in flight: {calls}")
    for key, probe in sorted((entry.get("probes") or {}).items()):
        if not isinstance(probe, dict):
            continue
        if "error" in probe and len(probe) == 1:
            lines.append(f"{key}: probe failed: {probe['error']}")
            continue
        depths = {k: v for k, v in probe.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if depths:
            lines.append(f"{key}: " + " ".join(f"{k}={v}" for k, v in sorted(depths.items())))
        nested = {k: v for k, v in probe.items() if isinstance(v, dict) and k != "stats"}
        busy = {k: v for k, v in nested.items() if any(n for n in v.values() if isinstance(n, int))}
        if nested and not depths:
            detail = "; ".join(f"{k} " + " ".join(f"{a}={b}" for a, b in sorted(v.items()))
                               for k, v in sorted(busy.items()))
            lines.append(f"{key} ({len(nested)}): " + (detail if busy else "all idle"))
    return lines


def format_stack(stack: list[dict[str, Any]], indent: str) -> list[str]:
    lines = []
    for f in stack:
        lines.append(f'{indent}File "{f.get("file")}", line {f.get("line")}, in {f.get("func")}')
        if f.get("code"):
            lines.append(f"{indent}  {f['code']}")
    return lines


def format_group(group: list[dict[str, Any]]) -> list[str]:
    first = group[0]
    who = ", ".join(f"{e['name']} (pid {e['pid']})" for e in group)
    head = f"{len(group)} processes with the same stacks: {who}" if len(group) > 1 else who
    lines = [f"{head}  [job {first['job']}]"]
    for e in group:
        prefix = f"  {e['name']}: " if len(group) > 1 else "  "
        lines.append(prefix + format_loop(e))
        if probes := format_probes(e):
            lines.append(prefix + "; ".join(probes))
    if not first["responded"]:
        return lines + format_fallback(first.get("fallback") or {})
    for thread in sorted(first.get("threads") or [], key=lambda t: t.get("name") != "MainThread"):
        if thread.get("name") == "rlmesh.control":
            continue  # it is busy answering this very request
        lines.append(f"  Thread {thread.get('name')}{' (daemon)' if thread.get('daemon') else ''}"
                     " (most recent call last):")
        lines += format_stack(thread.get("stack") or [], "    ")
    for task in first.get("tasks") or []:
        done = " (done)" if task.get("done") else ""
        lines.append(f"  Task {task.get('name')}: {task.get('coro')}{done}")
        lines += format_stack(task.get("stack") or [], "    ")
    return lines


def format_fallback(fallback: dict[str, Any]) -> list[str]:
    lines = [f"  note: {n}" for n in fallback.get("notes") or []]
    if fallback.get("faulthandler"):
        lines.append(f"  faulthandler dump (SIGUSR2, from {fallback.get('faulthandler_file')}):")
        lines += ["    " + line for line in fallback["faulthandler"].rstrip().splitlines()]
    if fallback.get("py_spy"):
        lines.append("  py-spy dump:")
        lines += ["    " + line for line in fallback["py_spy"].rstrip().splitlines()]
    return lines


def format_text(entries: list[dict[str, Any]]) -> str:
    """The human report: by role, identical processes once, blocked loops flagged."""
    blocked = [e for e in entries if e["blocked"] or not e["responded"]]
    lines = [f"rlmesh stack: {len(entries)} process{'es' if len(entries) != 1 else ''}"
             + (f", {len(blocked)} blocked or unresponsive" if blocked else "")]
    role = None
    for group in group_entries(entries):
        if group[0]["role"] != role:
            role = group[0]["role"]
            count = sum(1 for e in entries if e["role"] == role)
            lines += ["", f"=== {role} ({count}) ==="]
        lines += [""] + format_group(group)
    return "\n".join(lines) + "\n"


# --- the command ---

def main(args: Any) -> int:
    root = Path(args.root) if args.root else runs_root()
    targets, stale = find_targets(root, args.job)
    errors = []
    if args.job and not any(rd.job_id == args.job for rd in all_run_dirs(root)):
        errors.append(f"no job {args.job!r} under {root}")
    if args.pid:
        live = {t.record.pid for t in targets}
        errors += [explain_unknown_pid(pid, root) for pid in args.pid if pid not in live]
        targets = [t for t in targets if t.record.pid in set(args.pid)]
    for err in errors:
        print(f"rlmesh stack: error: {err}", file=sys.stderr)
    if not targets:
        if not errors:
            where = f"job {args.job} under {root}" if args.job else root
            skipped = f" ({stale} stale records of exited processes skipped)" if stale else ""
            print(f"rlmesh stack: no live rlmesh processes found in {where}{skipped}",
                  file=sys.stderr)
        return 1
    entries = collect(targets, args.timeout)
    if args.json:
        json.dump({"root": str(root), "processes": entries, "errors": errors}, sys.stdout,
                  indent=1, default=str)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_text(entries))
    return 1 if errors else 0

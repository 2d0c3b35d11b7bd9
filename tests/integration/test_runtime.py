"""The runtime end to end with real processes and sockets: calls, streams, named actors,
supervision and restarts, start failures, and no orphans."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import psutil
import pytest
import uvloop

from rlmesh.runtime import (ActorStartError, ActorUnavailable, Job, RemoteError,
                            RestartPolicy)

from .runtime_actors import (BadSpin, Counter, ExitMarker, FailsToStart, SpinningCounter, WhereAmI,
                             Worker)

MODES = ["inproc", "ipc", "tcp"]


def run(coro):
    return uvloop.run(coro)


@pytest.mark.parametrize("mode", MODES)
def test_call_tell_errors_and_timeouts(mode):
    async def main():
        async with Job(mode) as job:
            c = await job.spawn(Counter, start=10)
            assert await c.call("inc", 5) == 15
            assert await c.call("inc", k=2) == 17  # arguments by name
            await c.tell("inc", 100)
            await c.tell("inc", 1000)
            assert await c.call("get") == 1117  # tells are processed in order before this call
            with pytest.raises(RemoteError) as err:
                await c.call("nope")
            assert err.value.etype == "UnknownCall" and "inc" in str(err.value)
            with pytest.raises(RemoteError) as err:
                await c.call("inc", 1, 2, 3)
            assert err.value.etype == "BadRequest"
            with pytest.raises(RemoteError) as err:
                await c.call("inc", "a string")  # not the int its signature annotates
            assert err.value.etype == "BadRequest" and "'k' must be int" in err.value.remote_msg
            assert await c.call("get") == 1117  # refused before it ran
            w = await job.spawn(Worker)
            with pytest.raises(ActorUnavailable, match="within 0.2 s"):
                await w.call("slow", 5.0, timeout=0.2)
            assert await w.call("slow", 0.01) == 0.01  # the late reply did not confuse it
            arr = np.arange(100_000, dtype=np.float64).reshape(100, 1000)[:, ::3]
            back = await w.call("echo", {"a": arr, "t": (1, "x")})
            np.testing.assert_array_equal(back["a"], arr)
            assert back["t"] == (1, "x")
            import torch

            t = torch.ones(100_000)  # out of band
            assert await w.call("double_in_place", t) == 200_000.0
            assert float(t.sum()) == 100_000.0  # every transport, inproc too, gave it a copy
    run(main())


def test_concurrent_calls_each_keep_their_own_timeout():
    """A handle watches its calls' deadlines with one timer: a short timeout that comes
    after a long one still fires on its own deadline, calls left waiting when the timer
    fires are watched on, and calls answered in time are not failed later."""

    async def main():
        async with Job("ipc") as job:
            h = await job.spawn(Worker)
            long_call = asyncio.ensure_future(h.call("slow", 1.5, timeout=30))
            await asyncio.sleep(0.05)  # the watch is now set for the long call's deadline
            # If the short deadlines waited for the long one's timer, wait_for would fail.
            with pytest.raises(ActorUnavailable, match="'slow' within 0.2 s"):
                await asyncio.wait_for(h.call("slow", 5.0, timeout=0.2), 10)
            short = [asyncio.ensure_future(h.call("slow", 5.0, timeout=t)) for t in (0.3, 0.6)]
            answered = asyncio.ensure_future(h.call("slow", 0.1, timeout=0.9))
            results = await asyncio.wait_for(
                asyncio.gather(*short, answered, return_exceptions=True), 10)
            assert [type(r) for r in results[:2]] == [ActorUnavailable, ActorUnavailable]
            assert results[2] == 0.1
            assert await asyncio.wait_for(long_call, 10) == 1.5  # not failed by any sweep
            assert h._deadlines == {} and h._pending == {}

    run(main())


@pytest.mark.parametrize("mode", ["ipc", "tcp"])
def test_blocking_calls_from_a_thread_with_timeouts_and_a_spinning_actor(mode):
    """``call_sync`` from plain code: results, remote errors, a timeout that leaves the
    handle usable (the late reply is not taken for the next one), no timeout after one;
    an actor with ``spin_wait_us`` answers the same, and a bad value stops its start."""

    def calls(w, c):
        got = [w.call_sync("echo", {"x": [1, 2]})]
        with pytest.raises(RemoteError, match="UnknownCall"):
            w.call_sync("nope")
        with pytest.raises(ActorUnavailable, match="'slow' within 0.2 s"):
            w.call_sync("slow", 1.0, timeout=0.2)
        got.append(w.call_sync("slow", 0.01, timeout=None))
        time.sleep(1.0)  # the late reply of the timed-out call has come by now
        got.append(w.call_sync("slow", 0.02, timeout=5))
        got += [c.call_sync("inc", k) for k in range(1, 201)]
        return got

    async def main():
        async with Job(mode) as job:
            w = await job.spawn(Worker)
            c = await job.spawn(SpinningCounter)
            got = await asyncio.get_running_loop().run_in_executor(None, calls, w, c)
            assert await c.call("get") == 20100  # the loop's own calls reach it as well
            with pytest.raises(ActorStartError, match="spin_wait_us must be a number"):
                await job.spawn(BadSpin, restart=RestartPolicy(max_restarts=0))
            return got

    got = run(main())
    assert got[:3] == [{"x": [1, 2]}, 0.01, 0.02]
    assert got[3:] == [k * (k + 1) // 2 for k in range(1, 201)]


@pytest.mark.parametrize("mode", MODES)
def test_stream_is_ordered_and_bounded_by_credit(mode):
    async def main():
        async with Job(mode) as job:
            w = await job.spawn(Worker)
            stream = w.stream("consume", window=3)
            peak = 0
            for i in range(30):
                await stream.send(np.full(50_000, i, dtype=np.float32))
                peak = max(peak, stream.in_flight)
                assert stream.in_flight <= 3
            await stream.flush()
            assert stream.in_flight == 0
            assert peak == 3  # the consumer is slower: the window was used, never exceeded
            assert await w.call("received") == [50_000.0 * i for i in range(30)]
    run(main())


@pytest.mark.parametrize("mode", ["inproc", "ipc"])
def test_stream_item_failure_surfaces_at_the_sender_and_the_stream_goes_on(mode):
    async def main():
        async with Job(mode) as job:
            w = await job.spawn(Worker)
            stream = w.stream("picky", window=2)
            with pytest.raises(RemoteError, match="three is not allowed"):
                for i in range(6):
                    await stream.send(i)
                await stream.flush()
            for i in range(6, 8):
                await stream.send(i)
            await stream.flush()
            assert stream.in_flight == 0  # the failed item's credit came back too
            got = await w.call("received")
            assert 3.0 not in got and got[-2:] == [6.0, 7.0]
    run(main())


@pytest.mark.parametrize("mode", MODES)
def test_named_actor_reached_from_another_actor(mode):
    async def main():
        async with Job(mode) as job:
            counter = await job.spawn(Counter, name="counter")
            workers = [await job.spawn(Worker) for _ in range(2)]
            await asyncio.gather(*(w.call("bump_counter_async", 5) for w in workers))
            if mode != "inproc":  # blocking sync calls would deadlock a single event loop
                await asyncio.gather(*(w.call("bump_counter_like_env_code", 3) for w in workers))
            expected = 10 if mode == "inproc" else 16
            assert await counter.call("get") == expected
            assert await (await job.get_actor("counter")).call("get") == expected
            with pytest.raises(ValueError, match="already"):
                await job.spawn(Counter, name="counter")
            with pytest.raises(KeyError, match="no actor named 'nobody'"):
                await job.get_actor("nobody", timeout=0.2)
    run(main())


def test_dead_actor_is_reported_with_exit_code_and_output_then_restarted():
    async def main():
        async with Job("ipc", heartbeat_interval=0.2, heartbeat_timeout=2.0) as job:
            events = []
            job.supervisor.listeners.append(events.append)
            w = await job.spawn(Worker, restart=RestartPolicy(max_restarts=1, backoff_s=0.1))
            first_pid = await w.call("pid")
            with pytest.raises(ActorUnavailable, match="died"):
                await w.call("crash", 3)
            await _wait_for(lambda: any(e.kind == "restarted" for e in events))
            died = next(e for e in events if e.kind == "died")
            assert died.exit_code == 3
            assert any("worker about to exit with 3" in line for line in died.last_lines)
            assert "exit code 3" in died.detail
            second_pid = await w.call("pid")  # same handle, new process
            assert second_pid != first_pid
            with pytest.raises(ActorUnavailable):
                await w.call("crash", 4)
            await _wait_for(lambda: any(e.kind == "gave_up" for e in events))
            with pytest.raises(ActorUnavailable, match="gone"):
                await w.call("pid")
    run(main())


def test_hung_actor_is_detected_and_restarted():
    async def main():
        async with Job("ipc", heartbeat_interval=0.2, heartbeat_timeout=1.5) as job:
            events = []
            job.supervisor.listeners.append(events.append)
            w = await job.spawn(Worker, restart=RestartPolicy(max_restarts=1, backoff_s=0.1))
            pid = await w.call("pid")
            os.kill(pid, signal.SIGSTOP)  # frozen: neither its loop nor its control thread runs
            await _wait_for(lambda: any(e.kind == "restarted" for e in events), timeout=15)
            hung = next(e for e in events if e.kind == "hung")
            assert "no heartbeat" in hung.detail
            # SIGUSR2 cannot be handled while it is stopped: no stacks, but no hang either
            assert hung.exit_code == -signal.SIGKILL
            assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
            assert await w.call("pid") != pid
    run(main())


def test_live_actor_is_not_killed_when_the_supervising_loop_was_too_busy_to_read_pongs():
    """A stall of the supervising process itself (a learner thread holding the GIL, a loaded
    machine) looks like silence from every child; the child answers the confirming ping."""
    async def main():
        async with Job("ipc", heartbeat_interval=0.2, heartbeat_timeout=1.5) as job:
            events = []
            job.supervisor.listeners.append(events.append)
            w = await job.spawn(Worker, restart=RestartPolicy(max_restarts=1, backoff_s=0.1))
            pid = await w.call("pid")
            time.sleep(3.0)  # blocks this loop, the supervisor's: no ping sent, no pong read
            await asyncio.sleep(3.0)
            assert [e.kind for e in events] == []
            assert await w.call("pid") == pid
    run(main())


def test_hung_actor_stacks_are_taken_before_it_is_killed():
    async def main():
        async with Job("ipc", heartbeat_interval=0.2, heartbeat_timeout=1.5) as job:
            events = []
            job.supervisor.listeners.append(events.append)
            w = await job.spawn(Worker)
            await w.tell("spin_holding_gil")
            await _wait_for(lambda: any(e.kind == "gave_up" for e in events), timeout=15)
            hung = next(e for e in events if e.kind == "hung")
            assert "its stacks when it hung are in" in hung.detail
            assert any("spin_holding_gil" in line for line in hung.last_lines)
    run(main())


def test_start_failure_reports_the_error_and_output():
    async def main():
        async with Job("ipc") as job:
            with pytest.raises(ActorStartError) as err:
                await job.spawn(FailsToStart)
            text = str(err.value)
            assert "cannot find the simulator binary" in text
            assert "loading something that is not there" in text
            assert "exit code 1" in text
            with pytest.raises(ActorStartError, match="No module named"):
                await job.spawn("no_such_module.anywhere:Thing")
    run(main())


def test_actor_environment(monkeypatch):
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "3")  # the user's own setting wins

    async def main():
        async with Job("ipc") as job:
            w = await job.spawn(Worker, env={"OMP_NUM_THREADS": "2", "MY_SETTING": "x"})
            assert await w.call("getenv", "MY_SETTING") == "x"
            assert await w.call("getenv", "OMP_NUM_THREADS") == "2"
            assert await w.call("getenv", "OPENBLAS_NUM_THREADS") == "1"
            assert await w.call("getenv", "MKL_NUM_THREADS") == "3"
            assert await w.call("getenv", "RLMESH_RUN_DIR") == str(job.run_dir.path)
    run(main())


def test_graceful_stop_removes_process_and_name():
    async def main():
        async with Job("ipc") as job:
            c = await job.spawn(Counter, name="counter")
            pid = (job.run_dir.read_process("counter")).pid
            await job.stop_actor("counter")
            assert job.run_dir.lookup_name("counter") is None
            await _wait_for(lambda: not _alive(pid))
            with pytest.raises(ActorUnavailable):
                await c.call("get")
    run(main())


DRIVER = textwrap.dedent("""
    import asyncio, json, os, sys, uvloop
    sys.path.insert(0, {root!r})
    from rlmesh.runtime import Job
    from tests.integration.runtime_actors import Worker

    async def main():
        job = await Job("ipc").start()
        workers = [await job.spawn(Worker) for _ in range(2)]
        pids = [await w.call("pid") for w in workers]
        await workers[0].call("spawn_grandchild")
        grandchild = job.run_dir.read_process("grandchild").pid
        print(json.dumps(pids + [grandchild]), flush=True)
        await asyncio.sleep(3600)

    uvloop.run(main())
""")


def test_sigkill_of_the_driver_leaves_no_actor_alive():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    driver = subprocess.Popen([sys.executable, "-c", DRIVER.format(root=root)],
                              stdout=subprocess.PIPE, text=True)
    try:
        pids = json.loads(driver.stdout.readline())
        assert len(pids) == 3 and all(_alive(p) for p in pids)
        driver.send_signal(signal.SIGKILL)
        driver.wait(5)
        deadline = time.monotonic() + 5.0
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in pids if _alive(p)], "actor processes outlived the driver"
    finally:
        driver.kill()
        driver.wait()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def _wait_for(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


def test_a_stopped_actor_process_runs_its_exit_handlers_and_flushes_its_output(tmp_path):
    """Actor processes end without the interpreter's teardown (quick_exit), but what a
    normal exit does for the user still happens: atexit handlers, flushed stdout."""
    marker = tmp_path / "exited"

    async def main():
        async with Job("ipc") as job:
            await job.spawn(ExitMarker, path=str(marker), name="marker")
            sup = job.supervisor.children["marker"]
            log = sup.child.log_path
        return sup.child.poll(), log

    code, log = run(main())
    assert code == 0
    assert marker.read_text() == "exit handler ran"
    assert log.read_text().endswith("last words")


def test_closing_the_control_thread_wakes_it_from_its_poll(tmp_path, monkeypatch):
    """close() ends the control thread at once, not at its poll's next timeout (which
    every process's shutdown waited out)."""
    import zmq

    from rlmesh.runtime.control import ControlThread
    from rlmesh.runtime.diagnostics import Diagnostics
    from rlmesh.wire import codec, messages as M

    monkeypatch.setattr(ControlThread, "POLL_MS", 600_000)
    thread = ControlThread(f"ipc://{tmp_path}/ctl", Diagnostics("t", "test"), lambda: None)
    thread.start()
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    try:
        sock.connect(thread.address)
        sock.send_multipart(codec.encode(M.make(M.PING, id=1)))
        assert sock.poll(10_000), "no PONG: the control thread is not serving"
        sock.recv_multipart()
        time.sleep(0.3)  # back in its poll
        thread.close()
        thread.join(20)
        assert not thread.is_alive(), "close() did not wake the control thread"
    finally:
        thread.close()
        sock.close(linger=0)
        ctx.term()


def test_an_actor_takes_over_a_warm_interpreter_started_with_its_environment(runs_root):
    """process.prestart: the next actor process started with the same environment is the
    warm interpreter (imports done before the actor was known), in its run directory and
    with its output in its log; one started with another environment gets a process of
    its own, and discard_warm ends the warm one it did not take."""
    from rlmesh.runtime import process

    process.prestart(1, {"WARM_TEST_MARKER": "warm"}, ["tests.integration.runtime_actors"])
    (warm,) = process._warm
    try:
        async def main():
            async with Job("ipc") as job:
                other = await job.spawn(WhereAmI, env={"WARM_TEST_MARKER": "other"})
                assert process._warm == [warm]  # not taken: not its environment
                job.child_env["WARM_TEST_MARKER"] = "warm"
                taken = await job.spawn(WhereAmI, name="taken")
                log = job.supervisor.children["taken"].child.log_path
                return await other.call("info"), await taken.call("info"), job.run_dir.path, log

        other, taken, run_dir, log = run(main())
    finally:
        process.discard_warm()
    assert taken == {"pid": warm.popen.pid, "run_dir": str(run_dir), "marker": "warm"}
    assert other["pid"] != warm.popen.pid and other["marker"] == "other"
    assert f"WhereAmI in pid {warm.popen.pid}" in log.read_text()
    assert warm.popen.poll() is not None


def test_a_warm_interpreter_nobody_takes_ends_when_discarded_or_when_its_parent_dies():
    from rlmesh.runtime import process

    process.prestart(1, {}, [])
    (warm,) = process._warm
    process.discard_warm()
    assert warm.popen.poll() is not None and not process._warm

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {root!r})
        from rlmesh.runtime import process
        process.prestart(1, {{}}, [])
        print(process._warm[0].popen.pid, flush=True)
        time.sleep(600)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(parent.stdout.readline())
        assert _alive(pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(5)
        deadline = time.monotonic() + 5.0
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid), "a warm interpreter outlived its parent"
    finally:
        parent.kill()
        parent.wait()

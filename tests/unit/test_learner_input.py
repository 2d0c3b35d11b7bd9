"""What feeds an asynchronous learner, without sockets: fragments joined into train batches,
the bounded queue between the event loop and the update thread, the minibatch buffer,
replay mixing, stale batches dropped, and the queue timeout."""

from __future__ import annotations

import asyncio
import queue
import threading

import numpy as np
import pytest

from rlmesh.roles.learner_input import BatchBuilder, BatchQueue, LearnerInput, LearnerQueueTimeout
from tests.unit.test_learner import fragment


def versioned(t: int, b: int, version: int) -> dict:
    f = fragment(t, b)
    f["env_steps"] = t * b
    f["policy_version"] = version
    return f


def test_batch_builder_joins_fragments_until_the_batch_size():
    builder = BatchBuilder(batch_size=25)
    assert builder.add(versioned(5, 2, 3)) is None
    assert builder.add(versioned(5, 2, 4)) is None
    assert builder.pending_steps == 20
    batch = builder.add(versioned(4, 3, 5))  # shorter: padded at the end, masked
    assert batch is not None and builder.pending_steps == 0
    columns = batch["policies"]["default_policy"]
    assert columns["obs"].shape[:2] == (5, 7)
    assert batch["env_steps"] == 32 == int(columns["mask"].sum())
    assert batch["policy_versions"].tolist() == [3, 4, 5]  # one per fragment
    empty = versioned(1, 2, 6)
    empty["env_steps"] = 0
    assert builder.add(empty) is None and builder.pending_steps == 0


def test_batch_queue_put_waits_for_room_and_get_makes_it():
    async def scenario():
        q = BatchQueue(maxsize=2)
        await q.put("a")
        await q.put("b")
        third = asyncio.ensure_future(q.put("c"))
        await asyncio.sleep(0.05)
        assert not third.done() and q.qsize() == 2  # full: the sender waits
        got = await asyncio.get_running_loop().run_in_executor(None, q.get, 1.0)
        await asyncio.wait_for(third, 1.0)
        assert got == "a" and q.qsize() == 2
        with pytest.raises(queue.Empty):
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: [q.get(1.0), q.get(1.0), q.get(0.05)])
    asyncio.run(scenario())


def feeder(batches: list) -> callable:
    items = list(batches)

    def take(timeout: float):
        if not items:
            raise queue.Empty
        return items.pop(0)
    return take


def batch(name: str, version: int = 0) -> dict:
    return {"name": name, "policy_versions": np.array([version, version + 1])}


def names(inp: LearnerInput, n: int, version: int = 0) -> list[tuple[str, bool]]:
    out = []
    for _ in range(n):
        b, new = inp.next(version, timeout=0.1)
        out.append((b["name"], new))
    return out


def test_each_batch_is_trained_on_num_passes_times_cycling_the_buffer():
    inp = LearnerInput(feeder([batch(c) for c in "abcd"]), buffer_size=2, num_passes=2)
    assert names(inp, 8) == [("a", True), ("b", True), ("a", False), ("b", False),
                             ("c", True), ("d", True), ("c", False), ("d", False)]
    assert inp.counters["num_batches_new"] == 4


def test_replay_mixes_in_old_batches_at_the_proportion():
    inp = LearnerInput(feeder([batch(str(i)) for i in range(100)]), replay_proportion=0.5,
                       replay_slots=4, seed=0)
    got = names(inp, 60)
    new = [n for n, is_new in got if is_new]
    replayed = [n for n, is_new in got if not is_new]
    assert len(new) == 40 and len(replayed) == 20  # one replayed per two new
    assert new == [str(i) for i in range(40)]  # new ones in order, none skipped
    # only the last replay_slots new batches can come back
    for i, (n, is_new) in enumerate(got):
        if not is_new:
            seen = [m for m, fresh in got[:i] if fresh]
            assert n in seen[-4:]


def test_batches_past_the_policy_lag_are_dropped_and_counted():
    inp = LearnerInput(feeder([batch("old", 0), batch("new", 8)]), max_policy_lag=5)
    assert names(inp, 1, version=10) == [("new", True)]
    assert inp.counters["num_batches_dropped_stale"] == 1


def test_no_batch_in_time_is_a_clear_error():
    inp = LearnerInput(feeder([]))
    with pytest.raises(LearnerQueueTimeout, match="learner_queue_timeout=0.2 s"):
        inp.next(0, timeout=0.2)


def test_queue_feeds_a_thread_in_order():
    async def scenario():
        q = BatchQueue(maxsize=1)
        got = []

        def consume():
            for _ in range(20):
                got.append(q.get(5.0))
        thread = threading.Thread(target=consume)
        for i in range(20):
            await q.put(i)
            if i == 0:
                thread.start()
        await asyncio.get_running_loop().run_in_executor(None, thread.join, 5.0)
        assert got == list(range(20))
    asyncio.run(scenario())

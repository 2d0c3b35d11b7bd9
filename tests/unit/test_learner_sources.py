"""A learner actor's sources without sockets or processes: the stream (fragments joined and
queued for the update loop, its env-step clock), the replay shards' (TD errors out of the
statistics and back to their shard), the direct one, the actor's forwarding of the calls only
one source serves, and the one sender of weights to the param server."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from rlmesh.algorithms.impala import ImpalaConfig
from rlmesh.rl.columns import DEFAULT_POLICY_ID
from rlmesh.roles.learner_actor import LearnerActor
from rlmesh.roles.learner_input import StreamSource
from rlmesh.roles.learner_source import DirectSource, InputClosed
from rlmesh.roles.replay_input import ReplayInput, ReplaySource
from rlmesh.roles.weight_publisher import WeightPublisher
from tests.unit.test_learner_input import versioned
from tests.unit.test_replay_input import BATCH, filled_shards, serve


def test_a_stream_joins_fragments_into_batches_for_the_update_loop():
    cfg = ImpalaConfig().training(train_batch_size=20)
    stopping = []

    async def feed_and_take() -> tuple[StreamSource, dict, bool]:
        source = StreamSource(cfg, rank=0, world_size=2, stopped=lambda: bool(stopping))
        for version in (3, 4):
            await source.add_fragment(versioned(5, 2, version))
        with pytest.raises(ValueError, match="not a fragment"):
            await source.add_fragment({"env_steps": -1, "policy_version": 0})
        # The update thread's side, on a thread of its own as in the learner.
        return (source, *await asyncio.to_thread(source.next, 5, 1.0))

    source, batch, is_new = asyncio.run(feed_and_take())
    assert is_new and batch["env_steps"] == 20 and batch["policy_versions"].tolist() == [3, 4]
    assert source.timesteps() == 20 * 2  # each of the 2 ranks got its share
    metrics = source.metrics()
    assert metrics["num_batches_new"] == 1 and metrics["num_fragments_lost"] == 1
    stopping.append(1)
    with pytest.raises(InputClosed):
        source.next(version=5, timeout=1.0)


def test_while_a_batch_waits_no_runners_fragment_joins_the_next_one():
    """One batch queued (learner_queue_size 1) and two runners: the fragment that would
    start the next batch waits, its sender's call held, until the learner takes the queued
    batch; before, it joined the next batch at once, and the batches trained lagged the
    sampler by a batch more than the queue's size."""
    cfg = ImpalaConfig().training(train_batch_size=20, learner_queue_size=1)

    async def scenario() -> None:
        source = StreamSource(cfg)
        for version in (3, 4):  # runner A's and runner B's: a batch, queued
            await source.add_fragment(versioned(5, 2, version))
        late = asyncio.ensure_future(source.add_fragment(versioned(5, 2, 5)))
        await asyncio.sleep(0.05)
        assert not late.done() and source.builder.pending_steps == 0
        batch, _ = await asyncio.to_thread(source.next, 5, 1.0)  # the learner takes it
        await asyncio.wait_for(late, 1.0)
        assert batch["policy_versions"].tolist() == [3, 4]
        assert source.builder.pending_steps == 10  # the waiting fragment, in the next batch
        # a fragment that fills the next batch is queued at once: there is room
        await asyncio.wait_for(source.add_fragment(versioned(5, 2, 6)), 1.0)
        assert source.queue.qsize() == 1 and source.builder.pending_steps == 0

    asyncio.run(scenario())


def test_replay_batches_send_their_td_errors_to_their_shard_and_not_to_the_report():
    shards = filled_shards()
    sent, gone = [], []

    class Feeder:
        send, restarted = sent.append, gone.append

        def stop(self) -> None:
            pass

    async def train_one() -> tuple[dict, dict]:
        replay = ReplayInput(2, credits=1, batch_size=BATCH, beta=lambda t: 0.4,
                             prioritized=True)
        serve(replay, shards, replay.requests())
        source = ReplaySource(replay, Feeder())
        batch, _ = source.next(0, 1.0)
        stats = {DEFAULT_POLICY_ID: {"td_error": np.full((1, BATCH), 2.0), "loss": 1.0}}
        source.trained(batch, stats)  # from the update thread: sent on the loop
        source.replay_shard_restarted(1)
        await asyncio.sleep(0)
        return batch, stats

    batch, stats = asyncio.run(train_one())
    assert stats == {DEFAULT_POLICY_ID: {"loss": 1.0}}
    (route,) = sent
    assert route.shard == batch["replay"][0] and route.td_errors.shape == (BATCH,)
    assert gone == [1]


def test_calls_only_one_source_serves_are_refused_or_ignored_by_another():
    learner = LearnerActor.__new__(LearnerActor)  # what _source_call reads: its source
    learner.source = DirectSource()
    with pytest.raises(RuntimeError, match="add_fragment only after start_async"):
        learner._source_call("add_fragment", "start_async", {})
    assert learner._source_call("replay_shard_restarted", None, 0) is None
    assert learner.source.metrics() == {}
    with pytest.raises(RuntimeError, match="direct batches"):
        learner.source.next(0, 1.0)


class ParamServer:
    def __init__(self, refuse: bool = False) -> None:
        self.versions: list[int] = []
        self.refuse = refuse

    async def call(self, method: str, version: int, weights: dict) -> None:
        assert method == "set_weights"
        await asyncio.sleep(0)
        if self.refuse:
            raise ValueError("no")
        self.versions.append(version)


def test_the_publisher_sends_versions_in_order_and_a_newer_one_replaces_a_waiting_one():
    async def run(ps: ParamServer) -> WeightPublisher:
        publisher = WeightPublisher(ps)
        task = asyncio.ensure_future(publisher.run())
        publisher.offer((1, {}))
        await asyncio.sleep(0)  # 1 on its way
        assert not publisher.idle
        publisher.offer((2, {}))
        publisher.offer((3, {}))  # replaces 2, not yet sent
        assert await publisher.publish((4, {})) == 4
        await publisher.send(9, {})  # a synchronous run's own version
        task.cancel()
        return publisher

    ps = ParamServer()
    publisher = asyncio.run(run(ps))
    assert ps.versions == [1, 4, 9] and publisher.num_published == 3 and publisher.idle

    async def refused() -> None:
        publisher = WeightPublisher(ParamServer(refuse=True))
        task = asyncio.ensure_future(publisher.run())
        try:
            await publisher.publish((1, {}))
        finally:
            task.cancel()

    with pytest.raises(RuntimeError, match="refused the weights"):
        asyncio.run(refused())

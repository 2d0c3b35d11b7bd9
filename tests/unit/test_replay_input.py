"""The replay-fed learner's input (APEX), without sockets: sample requests on credits per
shard, batches to the update thread, TD errors routed back to the shard they were sampled
from with its incarnation, stale ones dropped, env steps summed over shard restarts; the
shards' training_intensity gate on sampling. The shards are real ``ShardBuffer``s."""

from __future__ import annotations

import numpy as np
import pytest

from rlmesh.roles.replay_input import InputClosed, ReplayInput
from rlmesh.rl.columns import DEFAULT_POLICY_ID
from tests.unit.test_replay_shard import fragments, make_shard

BATCH = 16


def filled_shards(n=2, **training):
    shards = [make_shard(j, **training).core for j in range(n)]
    for j, shard in enumerate(shards):
        for f in fragments(seed=j):
            shard.store(f)
    return shards


def replay_input(num_shards=2, credits=2, **kw):
    woken = []
    replay = ReplayInput(num_shards, credits=credits, batch_size=BATCH, beta=lambda t: 0.4,
                         prioritized=True, on_credit=lambda: woken.append(1), **kw)
    return replay, woken


def serve(replay, shards, requests):
    """What the socket shell does: each request's reply from its shard."""
    for j in requests:
        assert replay.sampled(j, shards[j].sample(BATCH, 0.4)) is None


def test_credits_bound_the_requests_per_shard_and_come_back_as_batches_are_taken():
    shards = filled_shards()
    replay, woken = replay_input(credits=2)
    requests = replay.requests()
    assert sorted(requests) == [0, 0, 1, 1]
    assert replay.requests() == []  # every credit is out
    serve(replay, shards, requests)
    assert replay.qsize() == 4
    assert replay.requests() == []  # batches queued untrained still hold their credits
    batch, is_new = replay.next(0, 1.0)
    assert is_new and woken == [1]
    assert replay.requests() == [batch["replay"][0]]  # that batch's shard may be asked again
    cols = batch["policies"][DEFAULT_POLICY_ID]
    assert cols["obs"].shape[:2] == (1, BATCH) and "batch_indexes" not in cols
    assert cols["weights"].shape == (1, BATCH)
    assert replay.counters["num_replay_batches"] == 1


def test_a_shard_with_nothing_to_give_is_asked_again_later_not_at_once():
    empty = make_shard(0).core  # below its share of learning starts
    replay, _ = replay_input(num_shards=1, credits=1)
    (j,) = replay.requests()
    delays = []
    for _ in range(8):
        delay = replay.sampled(j, empty.sample(BATCH, 0.4))
        assert delay is not None and replay.requests() == []  # not before the delay
        delays.append(delay)
        replay.credit_back(j)
        assert replay.requests() == [j]
    assert delays[0] < delays[-1] <= 0.05 and delays == sorted(delays)
    assert replay.counters["num_sample_refusals"] == 8
    assert replay.failed(j) > 0 and replay.counters["num_sample_errors"] == 1
    # A shard that served before and refuses now (training_intensity: the learner is
    # ahead) is asked again at once, as often as it refuses: runners catch up in ms.
    (full,) = filled_shards(1)
    assert replay.sampled(j, full.sample(BATCH, 0.4)) is None
    assert [replay.sampled(j, None) for _ in range(8)] == [delays[0]] * 8
    replay.restarted(j)  # empty again: backs off as while warming up
    assert replay.sampled(j, None) == delays[0] < replay.sampled(j, None)


def test_td_errors_go_back_to_the_shard_sampled_with_its_incarnation():
    shards = filled_shards()
    replay, _ = replay_input()
    serve(replay, shards, replay.requests())
    seen = set()
    for _ in range(4):
        batch, _ = replay.next(0, 1.0)
        j, idx, incarnation = batch["replay"]
        td = np.full(BATCH, 30.0)
        route = replay.trained(batch, td[None])  # [K=1, B] as the policy gives it
        assert route.shard == j and route.incarnation == shards[j].incarnation
        assert np.array_equal(route.batch_indexes, idx)
        # Delivered (what the shell's tell does), the shard takes them as priorities.
        assert shards[j].update_priorities(route.batch_indexes, route.td_errors,
                                           route.incarnation) == BATCH
        seen.add(j)
    assert seen == {0, 1}
    assert replay.counters["num_priority_updates_sent"] == 4
    assert all(s.stats()["num_stale_priority_updates"] == 0 for s in shards)


def test_priorities_for_a_restarted_shards_former_life_are_dropped():
    shards = filled_shards()
    replay, _ = replay_input()
    serve(replay, shards, replay.requests())
    old = [replay.next(0, 1.0)[0] for _ in range(4)]
    old1 = [b for b in old if b["replay"][0] == 1]
    assert old1
    replay.restarted(1)  # the driver saw shard 1 come back empty
    assert replay.trained(old1[0], np.ones(BATCH)) is None
    assert replay.counters["num_stale_priority_updates_dropped"] == 1
    # Its new life (a new incarnation) is served and routed as before; the old life's
    # batches stay stale, the other shard's are untouched.
    shards[1] = filled_shards(2)[1]
    shards[1].incarnation = "new-life"
    replay.requests()
    serve(replay, shards, [1])
    fresh = replay.next(0, 1.0)[0]
    assert fresh["replay"][2] == "new-life"
    assert replay.trained(fresh, np.ones(BATCH)).incarnation == "new-life"
    assert all(replay.trained(b, np.ones(BATCH)) is None for b in old1)
    assert replay.counters["num_stale_priority_updates_dropped"] == 1 + len(old1)
    other = next(b for b in old if b["replay"][0] == 0)
    assert replay.trained(other, np.ones(BATCH)).shard == 0


def test_env_steps_add_up_over_shards_and_their_restarts():
    replay, _ = replay_input()
    reply = {"columns": {"batch_indexes": np.arange(2), "obs": np.zeros((2, 1))}}
    replay.sampled(0, {**reply, "shard": 0, "incarnation": "a", "num_env_steps": 300})
    replay.sampled(1, {**reply, "shard": 1, "incarnation": "b", "num_env_steps": 200})
    replay.sampled(0, {**reply, "shard": 0, "incarnation": "a", "num_env_steps": 400})
    assert replay.env_steps == 600
    replay.sampled(1, {**reply, "shard": 1, "incarnation": "c", "num_env_steps": 50})
    assert replay.env_steps == 400 + 200 + 50  # shard 1's former life still counts


def test_a_local_shard_is_sampled_by_the_update_thread_and_takes_priorities_directly():
    (shard,) = filled_shards(1)
    replay, _ = replay_input(num_shards=1, local=shard)
    assert replay.requests() == []  # no request ever: no socket
    batch, _ = replay.next(0, 1.0)
    idx = batch["replay"][1]
    assert replay.trained(batch, np.full(BATCH, 40.0)) is None  # set here, nothing to send
    high = (40.0 + 1e-6) ** shard.buffer.alpha
    assert np.allclose(shard.buffer.tree.values[idx], high)
    assert shard.stats()["num_priority_updates"] == 1
    assert replay.env_steps == shard.stats()["num_env_steps"]


def test_without_prioritized_replay_nothing_is_routed():
    shards = filled_shards()
    replay = ReplayInput(2, credits=1, batch_size=BATCH, beta=lambda t: 0.4, prioritized=False)
    serve(replay, shards, replay.requests())
    assert replay.trained(replay.next(0, 1.0)[0], np.ones(BATCH)) is None


def test_the_update_thread_stops_waiting_once_stopped():
    stop = []
    replay, _ = replay_input(stopped=lambda: bool(stop))
    stop.append(1)
    with pytest.raises(InputClosed):
        replay.next(0, 1.0)


def test_shards_hold_the_learner_to_training_intensity():
    # 1 sample per env step: the shard serves 16-sample batches only while the samples
    # served stay within its env steps past the warm-up, plus one fragment's steps (on
    # their way in) and its credits' slack.
    shard = make_shard(training_intensity=1.0, num_steps_sampled_before_learning_starts=0).core
    for f in fragments()[:2]:  # 2 x 100 env steps
        shard.store(f)
    served = 0
    while shard.sample(BATCH) is not None:
        served += BATCH
    steps, slack = shard.stats()["num_env_steps"] + 100, shard.slack
    assert steps - BATCH - 1 <= served - slack <= steps
    assert not shard.learner_behind()  # never both: the runners may store on
    shard.store(fragments()[2])
    assert shard.sample(BATCH) is not None


def test_a_shard_warming_up_for_ever_is_asked_again_at_the_longest_delay_not_an_error():
    # 2,048 refusals in a row: a shard warming up for ~50 s at the longest delay. The
    # doubling used to overflow a float past ~1,025 (OverflowError killed the request's
    # task and its credit with it: the learner never trained).
    empty = make_shard(0).core
    replay, _ = replay_input(num_shards=1, credits=1)
    (j,) = replay.requests()
    delays = []
    for _ in range(2048):
        delays.append(replay.sampled(j, empty.sample(BATCH, 0.4)))
        replay.credit_back(j)
        assert replay.requests() == [j]
    assert delays[-1] == max(delays) == 0.05 and delays == sorted(delays)
    assert replay.counters["num_sample_refusals"] == 2048
    assert replay.counters["max_sample_refusals_in_a_row"] == 2048
    (full,) = filled_shards(1)
    assert replay.sampled(j, full.sample(BATCH, 0.4)) is None  # warm: served, streak over
    assert replay.counters["max_sample_refusals_in_a_row"] == 2048


class _Handle:
    """A shard's handle whose reply the learner cannot read (no incarnation)."""

    name = "replay_shard-0"

    def __init__(self) -> None:
        self.calls = 0

    async def call(self, method, *args, timeout=None):
        self.calls += 1
        return {"columns": {"batch_indexes": np.arange(2)}, "shard": 0}

    def mark_dead(self, why):
        pass


def test_a_sample_request_that_fails_in_the_learner_ends_its_input_loudly(caplog):
    # Its task used to die unseen ("Task exception was never retrieved") and its credit
    # with it: the learner waited for batches for ever and the run trained nothing.
    import asyncio

    from rlmesh.roles.replay_input import ReplayFeeder

    replay, _ = replay_input(num_shards=1, credits=1, stopped=lambda: True)
    handle = _Handle()

    async def feed():
        feeder = ReplayFeeder(replay, [handle])
        for _ in range(100):
            await asyncio.sleep(0.01)
            if handle.calls:
                break
        await asyncio.sleep(0.05)
        feeder.stop()

    with caplog.at_level("ERROR", logger="rlmesh.roles.replay_input"):
        asyncio.run(feed())
    assert handle.calls == 1
    with pytest.raises(RuntimeError, match="replay_shard-0.*KeyError.*incarnation"):
        replay.next(0, 1.0)  # the error before the stop flag: the run ends with its cause
    assert any("replay_shard-0" in r.getMessage() and "Traceback" in (r.exc_text or "")
               for r in caplog.records)

"""APEX's pieces without processes: the per-runner epsilons, and the replay shard's handling
of its messages (fragments in, samples out, priorities back, backpressure, restarts)."""

from __future__ import annotations

import asyncio

import gymnasium as gym
import numpy as np
import pytest

from rlmesh.algorithms.apex_config import ApexDQNConfig
from rlmesh.env.registry import space_to_data
from rlmesh.policy.numpy_q import NumpyQPolicy, epsilon_at, per_worker_epsilon
from rlmesh.policy.policy import class_path
from rlmesh.config.base import ConfigError
from rlmesh.roles.specs import ShardSpec
from rlmesh.roles.replay_shard import ReplayShard, ShardBuffer, shard_capacity
from tests.unit.test_replay import episode_streams, fragments_of

OBS = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
ACT = gym.spaces.Discrete(2)


# --- per-worker epsilon (RLlib's PerWorkerEpsilonGreedy: eps=0.4, alpha=7) ---

def test_per_worker_epsilons_follow_the_apex_formula():
    n = 8
    eps = [per_worker_epsilon(i, n) for i in range(1, n + 1)]
    assert eps[0] == pytest.approx(0.4)
    assert eps[-1] == pytest.approx(0.4 ** 8)
    for i, e in enumerate(eps):  # eps_i = eps^(1 + i/(N-1) * alpha), i from 0
        assert e == pytest.approx(0.4 ** (1 + i / (n - 1) * 7))
    assert eps == sorted(eps, reverse=True)
    assert per_worker_epsilon(1, 1) == pytest.approx(0.4)  # one runner: the first epsilon


def test_per_worker_epsilon_replaces_the_schedule_in_runners_only():
    ex = {"type": "PerWorkerEpsilonGreedy", "initial_epsilon": 1.0, "final_epsilon": 0.02,
          "epsilon_timesteps": 100}
    assert epsilon_at(ex, 0, worker_index=3, num_workers=3) == pytest.approx(0.4 ** 8)
    assert epsilon_at(ex, 0, worker_index=0, num_workers=3) == 1.0  # the driver's copy
    assert epsilon_at({**ex, "type": "EpsilonGreedy"}, 0, 3, 3) == 1.0


def test_each_runner_policy_acts_with_its_own_epsilon():
    cfg = (ApexDQNConfig().environment("CartPole-v1").env_runners(num_env_runners=4)
           .training(model={"fcnet_hiddens": [8]}, hiddens=[]))
    obs_space = gym.spaces.Box(-1, 1, (4,), np.float32)
    zeros = lambda *shape: np.zeros(shape, np.float32)  # noqa: E731
    weights = {"trunk.0.weight": zeros(8, 4), "trunk.0.bias": zeros(8),
               "a_head.weight": zeros(2, 8),
               "a_head.bias": np.array([1.0, 0.0], np.float32),  # greedy: always action 0
               "v_head.weight": zeros(1, 8), "v_head.bias": zeros(1)}
    obs = np.zeros((20_000, 4), np.float32)
    for index in (1, 2, 4):
        policy = NumpyQPolicy(obs_space, ACT, cfg)
        policy.worker_index = index  # what the EnvRunner sets
        policy.seed(index)
        policy.set_weights(weights)
        actions, _, _ = policy.compute_actions(obs, explore=True)
        random_share = 2 * float(np.mean(actions == 1))  # half the random picks are action 0
        assert random_share == pytest.approx(per_worker_epsilon(index, 4), abs=0.02)


# --- the replay shard's messages ---

def make_shard(index=0, **training) -> ReplayShard:
    cfg = (ApexDQNConfig().environment("CartPole-v1").env_runners(num_env_runners=2)
           .training(**{"num_replay_buffer_shards": 2, "train_batch_size": 16, "n_step": 3,
                        "num_steps_sampled_before_learning_starts": 100,
                        "replay_buffer_config": {"capacity": 1000}, **training})
           .debugging(seed=0))
    return ReplayShard(ShardSpec(cfg.to_dict(), class_path(type(cfg)), space_to_data(OBS),
                                 space_to_data(ACT), index).to_data())


def fragments(seed=0, num_envs=2, length=400, cut=50):
    streams = episode_streams(np.random.default_rng(seed), num_envs, length)
    out = fragments_of(streams, list(range(0, length + 1, cut)))
    for f in out:
        f["env_steps"] = int(f["mask"].sum())
    return out


def test_shard_holds_its_share_and_stores_nstep_transitions():
    shard = make_shard()
    assert shard.core.buffer.capacity == shard_capacity(1000, 2) == 500
    stored = sum(shard.core.store(f) for f in fragments(length=200))
    stats = shard.stats()
    assert stats["num_env_steps"] == 400 and stats["num_fragments"] == 4
    # Every step becomes a transition but the last few of each env, still waiting for
    # their n-step window.
    assert 400 - 2 * 2 <= stored + shard.core.nstep.num_pending <= 400
    assert stored == len(shard.core.buffer) == stats["size"]


def test_sampling_waits_for_the_shards_share_of_learning_starts():
    shard = make_shard(num_steps_sampled_before_learning_starts=300)  # 150 per shard
    frags = fragments(length=200)
    shard.core.store(frags[0])  # 100 env steps
    assert shard.core.sample(16) is None
    for f in frags[1:3]:
        shard.core.store(f)
    got = shard.core.sample(16, beta=0.5)
    cols = got["columns"]
    assert got["shard"] == 0 and got["incarnation"] == shard.core.incarnation
    assert set(cols) >= {"obs", "actions", "rewards", "next_obs", "discounts", "weights",
                         "batch_indexes"}
    assert all(len(v) == 16 for v in cols.values())
    assert np.all(cols["weights"] <= 1.0 + 1e-6) and np.all(cols["weights"] > 0)


def test_priorities_go_to_the_sampled_items_and_stale_ones_are_dropped():
    shard = make_shard()
    for f in fragments():
        shard.core.store(f)
    got = shard.core.sample(64)
    idx = got["columns"]["batch_indexes"]
    td = np.full(len(idx), 50.0)
    td[0] = np.nan  # a step the learner skipped keeps its priority
    assert shard.update_priorities(idx, td, got["incarnation"]) == len(idx) - 1
    leaves = shard.core.buffer.tree.values
    high = (50.0 + 1e-6) ** shard.core.buffer.alpha
    assert np.allclose(leaves[idx[1:]], high)
    # Mostly the high-priority items come back now.
    again = shard.core.sample(256)["columns"]["batch_indexes"]
    assert np.isin(again, idx[1:]).mean() > 0.5
    # Indexes sampled before a restart (another incarnation) mean nothing here.
    before = leaves.copy()
    assert shard.update_priorities(idx, np.zeros(len(idx)), "an-old-life") == 0
    assert np.array_equal(before, shard.core.buffer.tree.values)
    assert shard.stats()["num_stale_priority_updates"] == 1


def test_add_fragment_waits_while_the_learner_is_behind():
    shard = make_shard(training_intensity=1.0, num_steps_sampled_before_learning_starts=0)
    frags = fragments(length=400)

    async def scenario():
        await shard.add_fragment(frags[0])  # nothing sampled yet, but within the slack
        assert shard.core.learner_behind()  # 100 steps x 1.0 > 0 samples + 16 x 2 slack
        blocked = asyncio.ensure_future(shard.add_fragment(frags[1]))
        await asyncio.sleep(0.05)
        assert not blocked.done()  # the runner's credit is held back
        await shard.sample(64)
        await shard.sample(64)  # the learner caught up
        await asyncio.wait_for(blocked, 1.0)
        assert shard.stats()["wait_for_learner_s"] > 0

    asyncio.run(scenario())


def test_a_sample_ahead_of_the_intensity_waits_for_the_next_fragment_not_for_a_retry():
    shard = make_shard(training_intensity=1.0, num_steps_sampled_before_learning_starts=0)
    frags = fragments(length=400)

    async def scenario():
        await shard.add_fragment(frags[0])  # 100 steps: 100 + slack samples allowed
        while shard.core.sample(16) is not None:  # the learner draws all it may
            pass
        waiting = asyncio.ensure_future(shard.sample(16))
        await asyncio.sleep(0.02)
        assert not waiting.done()  # held, not refused: no None for the learner to retry
        await shard.add_fragment(frags[1])
        got = await asyncio.wait_for(waiting, 1.0)
        assert got is not None and len(got["columns"]["rewards"]) == 16
        # With nothing coming, the request is answered None after SAMPLE_WAIT_S.
        while shard.core.sample(16) is not None:
            pass
        assert await asyncio.wait_for(shard.sample(16), 1.0) is None

    asyncio.run(scenario())


def test_without_training_intensity_fragments_are_never_held():
    shard = make_shard(num_steps_sampled_before_learning_starts=0)

    async def scenario():
        for f in fragments(length=400):
            await asyncio.wait_for(shard.add_fragment(f), 1.0)

    asyncio.run(scenario())
    assert shard.stats()["wait_for_learner_s"] == 0.0


# --- worker-side prioritization: initial priorities from the runners' Q-values ---

def with_runner_q(fragment, rng):
    out = dict(fragment)
    shape = fragment["rewards"].shape
    out["action_q"] = rng.normal(size=shape).astype(np.float32)
    out["max_q"] = (out["action_q"] + rng.random(shape)).astype(np.float32)
    return out


def test_runner_q_values_give_each_new_transition_its_td_error_as_priority():
    shard = make_shard(n_step=1, gamma=0.9, replay_buffer_config={
        "capacity": 1000, "worker_side_prioritization": True})
    rng = np.random.default_rng(1)
    frag = with_runner_q(fragments(num_envs=1, length=100, cut=100)[0], rng)
    shard.core.store(frag)
    assert shard.stats()["num_runner_priorities"] > 0
    r, q, m = frag["rewards"][:, 0], frag["action_q"][:, 0], frag["max_q"][:, 0]
    term, trunc = frag["terminateds"][:, 0], frag["truncateds"][:, 0]
    leaves = shard.core.buffer.tree.values
    alpha, eps = shard.core.buffer.alpha, shard.core.buffer.eps
    checked = 0
    for t in range(len(r)):  # 1-step: stored in order, one per step (the last waits)
        if t + 1 >= len(r) - 1:
            break
        if term[t]:
            td = r[t] - q[t]
        elif trunc[t]:
            continue  # bootstrapped from the final observation: no runner Q, max priority
        else:
            td = r[t] + 0.9 * m[t + 1] - q[t]
        assert leaves[t] == pytest.approx((abs(td) + eps) ** alpha, rel=1e-4), t
        checked += 1
    assert checked > 50


def test_runner_q_values_are_ignored_without_worker_side_prioritization():
    shard = make_shard(n_step=3, replay_buffer_config={"capacity": 1000,
                                                       "worker_side_prioritization": False})
    rng = np.random.default_rng(2)
    for f in fragments(num_envs=2, length=200):
        shard.core.store(with_runner_q(f, rng))
    assert shard.stats()["num_runner_priorities"] == 0
    leaves = shard.core.buffer.tree.values[:len(shard.core.buffer)]
    assert np.allclose(leaves, 1.0)  # the highest priority so far: the initial one


def test_a_capacity_that_cannot_hold_the_learning_starts_is_refused_in_one_line():
    # Issue 48: capacity 20,000 over 2 shards holds 10,000 per shard, each waiting for
    # 25,000 (the default 50,000 learning starts): the learner never trained, silently.
    with pytest.raises(ConfigError) as e:
        ApexDQNConfig().training(replay_buffer_config={"capacity": 20_000}).validate()
    assert len(str(e.value).splitlines()) == 2  # "invalid config:", then its one line
    assert ("capacity 20,000 over 2 replay shard(s) holds 10,000 transitions per shard, fewer "
            "than the 25,000 each waits for") in str(e.value)
    assert "capacity to at least 50,000" in str(e.value)
    assert "num_steps_sampled_before_learning_starts to at most 20,000" in str(e.value)
    with pytest.raises(ConfigError, match="capacity 999 over 1 replay shard.*1,000 each"):
        ApexDQNConfig().training(num_replay_buffer_shards=1, replay_buffer_config={
            "capacity": 999}, num_steps_sampled_before_learning_starts=1000).validate()
    # The boundary is what a shard holds: exactly its share is accepted, and warms up.
    ok = ApexDQNConfig().training(replay_buffer_config={"capacity": 50_000})
    ok.validate()
    shard = ShardBuffer(ok, OBS, ACT, 1)
    assert shard.buffer.capacity == shard.min_size == 25_000
    from rlmesh.algorithms.apex_config import ApexDDPGConfig

    with pytest.raises(ConfigError, match="capacity 20,000 over 2"):
        ApexDDPGConfig().training(replay_buffer_config={"capacity": 20_000}).validate()

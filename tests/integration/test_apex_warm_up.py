"""APEX whose replay warm-up outlasts the point where the learner's retry delay used to
overflow (issue 48, point 1): real runners, shards and learner. Many sample requests in
flight per shard (replay_sample_requests_in_flight) make the shards refuse ~2,500 times a
second while they warm up, so a few seconds of warm-up pass the old ~1,025 refusals in a
row (at 2 requests in flight: ~26 s with 2 shards, on a slow env)."""

from __future__ import annotations

import pytest

from rlmesh.algorithms.apex import ApexDQNConfig

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("no_children_left")]

OLD_OVERFLOW = 1025  # refusals in a row from one shard: 0.002 * 2 ** 1024 overflowed


def test_apex_trains_after_a_warm_up_longer_than_the_old_overflow_point():
    config = (ApexDQNConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=2, rollout_fragment_length=50)
              .training(num_replay_buffer_shards=2, train_batch_size=32,
                        replay_sample_requests_in_flight=128,
                        num_steps_sampled_before_learning_starts=24_000,
                        target_network_update_freq=500, hiddens=[],
                        replay_buffer_config={"capacity": 50_000},
                        model={"fcnet_hiddens": [16]})
              .reporting(min_sample_timesteps_per_iteration=2000).debugging(seed=0))
    results = []
    with config.build() as algo:
        # Before the fix: 0 updates for ever (each shard's request tasks died with their
        # credits), the run going on and the results saying nothing.
        while len(results) < 40:
            results.append(algo.train())
            last = results[-1]
            if last["num_learner_updates"] > 0 and all(
                    s["num_samples"] > 0 for s in last["replay_shards"]):
                break  # each shard warm (its runner took its share) and serving
    last = results[-1]
    # The learner trains on both shards, and goes on training ...
    assert last["num_learner_updates_total"] > 0 and last["num_learner_updates"] > 0, (
        f"no update after {last['timesteps_total']} env steps")
    # ... though the shards refused past the old overflow point before they were warm.
    assert last["max_sample_refusals_in_a_row"] > OLD_OVERFLOW, (
        "the warm-up was too short to test anything: "
        f"{last['max_sample_refusals_in_a_row']} refusals in a row")
    assert len(last["replay_shards"]) == 2
    assert all(s["num_samples"] > 0 for s in last["replay_shards"])

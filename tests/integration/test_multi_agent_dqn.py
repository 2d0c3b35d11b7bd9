"""DQN with a multi-agent env and several policies: a replay buffer per policy in the
driver, n-step transitions per agent, each trained policy updated from its own buffer,
and a policy left out of policies_to_train bit-identical."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlmesh.algorithms.dqn import DQNConfig


def two_cartpoles(**multi_agent) -> DQNConfig:
    return (DQNConfig()
            .environment("examples.multi_agent_cartpole:make_env", env_config={"num_agents": 2})
            .env_runners(num_env_runners=1, rollout_fragment_length=64,
                         exploration_config={"final_epsilon": 0.04, "epsilon_timesteps": 4000})
            .training(lr=2.3e-3, train_batch_size=64, training_intensity=16.0, n_step=3,
                      num_steps_sampled_before_learning_starts=500,
                      target_network_update_freq=10, grad_clip=10.0, double_q=False,
                      dueling=False, hiddens=[],
                      replay_buffer_config={"capacity": 20_000},
                      model={"fcnet_hiddens": [64, 64], "fcnet_activation": "relu"})
            .multi_agent(policies={"p0", "p1"},
                         policy_mapping_fn="examples.multi_agent_cartpole:policy_per_agent",
                         **multi_agent)
            .reporting(min_sample_timesteps_per_iteration=1000)
            .debugging(seed=0))


@pytest.mark.timeout(300)
def test_two_dqn_policies_each_learn_from_their_own_buffer():
    with two_cartpoles().build() as algo:
        before = algo.get_weights()
        best = {"p0": -math.inf, "p1": -math.inf}
        for _ in range(25):
            result = algo.train()
            for pid, value in result.get("policy_reward_mean", {}).items():
                best[pid] = max(best[pid], value)
            if min(best.values()) >= 50:  # random acting: ~22 each
                break
        after = algo.get_weights()
        assert set(algo.replays) == {"p0", "p1"}
        # each agent's transitions went into its policy's buffer only
        assert len(algo.replays["p0"]) > 0 and len(algo.replays["p1"]) > 0
    assert min(best.values()) >= 50, f"not both policies learned: best means {best}"
    for pid in ("p0", "p1"):
        assert np.isfinite(result["info"]["learner"][pid]["total_loss"])
        assert any(not np.array_equal(before[pid][k], after[pid][k])
                   for k in before[pid] if not k.startswith("_"))
    assert result["replay_buffer_num_transitions"] > 0


def test_a_dqn_policy_not_trained_stays_bit_identical():
    with two_cartpoles(policies_to_train=["p0"]).build() as algo:
        before = algo.get_weights()
        for _ in range(2):
            result = algo.train()
        after = algo.get_weights()
    assert "total_loss" in result["info"]["learner"]["p0"]
    assert not result["info"]["learner"].get("p1")
    assert any(not np.array_equal(before["p0"][k], after["p0"][k]) for k in before["p0"]
               if not k.startswith("_"))
    for k in before["p1"]:
        if not k.startswith("_"):
            assert np.array_equal(before["p1"][k], after["p1"][k]), k

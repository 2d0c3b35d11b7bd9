"""The shipped multi-agent examples reach their goals: multi-agent CartPole (one shared
policy and a policy per agent) a combined 600 within 100k env steps, a learned policy 6.0
against a fixed heuristic in rock-paper-scissors within 200k, and self-play adding frozen
snapshots (and dropping old ones) while training, each snapshot frozen bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from examples import multi_agent_cartpole, rock_paper_scissors, self_play


@pytest.mark.parametrize("num_policies", [1, 2], ids=["shared", "two_policies"])
def test_multi_agent_cartpole_reaches_a_combined_600_within_100k(num_policies):
    result = multi_agent_cartpole.train(multi_agent_cartpole.config(2, num_policies),
                                        stop_reward=600, max_env_steps=100_000, log=False)
    assert result["episode_reward_mean"] >= 600, result["episode_reward_mean"]
    assert result["timesteps_total"] <= 100_000
    assert len(result["policy_reward_mean"]) == num_policies
    # each env step is a step of each live agent: agent steps outnumber env steps
    assert result["num_agent_steps_sampled"] > result["timesteps_total"]


def test_rock_paper_scissors_learned_beats_the_heuristic_within_200k():
    result = rock_paper_scissors.train(rock_paper_scissors.config(), stop_reward=6.0,
                                       max_env_steps=200_000, log=False)
    assert result["policy_reward_mean"]["learned"] >= 6.0
    assert result["timesteps_total"] <= 200_000
    assert not result["info"]["learner"]["always_same"]  # acts, never trains


def test_self_play_adds_frozen_snapshots_while_training():
    cfg = self_play.config()
    algo = cfg.build()
    try:
        frozen = {}
        for i in range(1, 7):
            algo.train()
            if i % 2 == 0:
                pid = f"main_v{i // 2}"
                algo.add_policy(pid, policy_state=algo.get_policy("main").get_state())
                frozen[pid] = algo.get_weights([pid])[pid]
                for name, value in algo.get_weights(["main"])["main"].items():
                    np.testing.assert_array_equal(frozen[pid][name], value)  # a copy of main
            if i == 5:
                algo.remove_policy("main_v1")
        result = algo.train()
        assert sorted(algo.policy_specs) == ["main", "main_v0", "main_v2", "main_v3"]
        # snapshots act (their agents' returns are reported) and never change
        assert {"main_v2"} <= set(result["policy_reward_mean"])
        for pid in ("main_v2", "main_v3"):
            for name, value in algo.get_weights([pid])[pid].items():
                np.testing.assert_array_equal(value, frozen[pid][name])
        assert [p for p, stats in result["info"]["learner"].items() if stats] == ["main"]
    finally:
        algo.stop()

"""MuJoCo through gymnasium's v5 envs, as a user runs rlmesh's tuned examples: SAC learns
InvertedPendulum-v5 (invertedpendulum-sac.yaml) to 950 within 20k env steps, and the PPO and
TD3 HalfCheetah-v5 examples run with their own settings (network sizes, filters, noise) and
report an episode. Needs the mujoco extra (pip install 'rlmesh[mujoco]'; make test has it)."""

from __future__ import annotations

import numpy as np
import pytest

from rlmesh.algorithms import PPOConfig
from rlmesh.algorithms.sac_config import SACConfig
from rlmesh.algorithms.td3_config import TD3Config
from rlmesh.tuned_examples import load_experiment

pytest.importorskip("mujoco", reason="the mujoco extra is not installed")

# A random policy keeps InvertedPendulum up for about 5 steps (return ~5; the first iteration
# of the example, all random actions, averaged 4.6). The example reached a mean of 1000 over
# its last 5 episodes after 9k-17k env steps on seeds 0-4 (seed 0: 11k, about a minute on
# 2 cores); the bar and budget are the issue's.
BAR, BUDGET = 950, 20_000


def test_sac_learns_inverted_pendulum_within_20k_steps():
    _, exp, _ = load_experiment("invertedpendulum-sac.yaml")
    assert exp["stop"] == {"episode_reward_mean": BAR, "timesteps_total": BUDGET}
    config = SACConfig.from_dict({**exp["config"], "seed": 0, "env": exp["env"]})
    with config.build() as algo:
        returns = []
        result = algo.train()
        returns.append(result["episode_reward_mean"])
        while returns[-1] < BAR and result["timesteps_total"] < BUDGET:
            result = algo.train()
            returns.append(result["episode_reward_mean"])
    assert returns[-1] >= BAR and result["timesteps_total"] <= BUDGET, (
        f"SAC did not learn InvertedPendulum-v5: mean return {returns[-1]:.1f} after "
        f"{result['timesteps_total']} env steps (random policy ~5); by iteration: "
        f"{[round(r, 1) for r in returns]}")
    assert returns[0] < 50  # the first iteration acted at random: the bar was earned


def _first_episode(algo, max_iterations: int) -> dict:
    """Train until an episode has been reported (HalfCheetah's are 1000 steps long)."""
    for _ in range(max_iterations):
        result = algo.train()
        if result["episodes_total"] > 0:
            return result
    raise AssertionError(f"no episode finished in {max_iterations} iterations "
                         f"({result['timesteps_total']} env steps)")


def test_ppo_halfcheetah_example_runs_and_reports_an_episode(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # mujoco writes its warnings to MUJOCO_LOG.TXT here
    _, exp, _ = load_experiment("halfcheetah-ppo.yaml")
    config = PPOConfig.from_dict({**exp["config"], "seed": 0, "env": exp["env"]})
    assert config.observation_filter == "MeanStdFilter" and config.model["free_log_std"]
    with config.build() as algo:
        result = _first_episode(algo, max_iterations=3)  # 512-step batches
        assert result["timesteps_total"] >= 1000
        assert np.isfinite(result["episode_reward_mean"])
        assert result["episode_len_mean"] == 1000  # v5's time limit, truncated
        assert np.isfinite(result["info"]["learner"]["default_policy"]["total_loss"])


def test_td3_halfcheetah_example_runs_and_reports_an_episode(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _, exp, _ = load_experiment("halfcheetah-td3.yaml")
    # The example's settings, but learning from step 800 (not 10k) so that one iteration of
    # 1000 steps also takes its 200 gradient steps of the [400, 300] networks.
    overrides = {"num_steps_sampled_before_learning_starts": 800,
                 "exploration_config": {**exp["config"]["exploration_config"],
                                        "random_timesteps": 800}}
    config = TD3Config.from_dict({**exp["config"], **overrides, "seed": 0, "env": exp["env"]})
    assert config.actor_hiddens == [400, 300] and config.policy_delay == 2
    with config.build() as algo:
        result = _first_episode(algo, max_iterations=2)
        assert result["timesteps_total"] >= 1000 and result["episode_len_mean"] == 1000
        assert np.isfinite(result["episode_reward_mean"])
        assert result["num_env_steps_trained"] >= 200 * 256  # 200 gradient steps of 256

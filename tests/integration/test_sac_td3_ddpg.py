"""SAC, TD3 and DDPG end to end on Pendulum-v1 with an env-runner process: each learns past
a low bar, a checkpoint brings back the target networks, the optimizers' state and SAC's
alpha, discrete SAC trains on CartPole, and a continuous-action algorithm given a Discrete
space is refused in one line before anything starts."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlmesh.algorithms.ddpg import DDPGConfig
from rlmesh.driver.inference import InferencePolicy
from rlmesh.algorithms.sac import SACConfig
from rlmesh.algorithms.td3 import TD3Config
from rlmesh.config.base import ConfigError

REPO = Path(__file__).resolve().parents[2]
NET = [64, 64]
pytestmark = pytest.mark.usefixtures("no_children_left")


def pendulum(config, learning_starts=500, seed=0):
    """Small networks, one runner process, a gradient step of 256 samples per env step
    taken in rounds of 4, results over the last 5 episodes, iterations of 500 steps."""
    return (config.environment("Pendulum-v1")
            .env_runners(num_env_runners=1, rollout_fragment_length=4)
            .training(train_batch_size=256, training_intensity=256,
                      num_steps_sampled_before_learning_starts=learning_starts,
                      replay_buffer_config={"type": "MultiAgentReplayBuffer", "capacity": 20_000})
            .reporting(metrics_num_episodes_for_smoothing=5,
                       min_sample_timesteps_per_iteration=500)
            .debugging(seed=seed))


def sac_config():
    net = {"fcnet_hiddens": NET}
    rates = {"actor_learning_rate": 1e-3, "critic_learning_rate": 1e-3,
             "entropy_learning_rate": 1e-3}
    return pendulum(SACConfig().training(q_model_config=net, policy_model_config=net,
                                         optimization_config=rates))


def td3_config():
    return pendulum(TD3Config().training(actor_hiddens=NET, critic_hiddens=NET, gamma=0.98)
                    .env_runners(exploration_config={"random_timesteps": 500}))


def ddpg_config():
    return pendulum(DDPGConfig().training(actor_hiddens=NET, critic_hiddens=NET, gamma=0.98,
                                          tau=0.005)
                    .env_runners(exploration_config={"type": "GaussianNoise", "stddev": 0.1,
                                                     "random_timesteps": 500,
                                                     "final_scale": 1.0}))


def train_until(algo, bar: float, max_steps: int) -> tuple[float, dict]:
    best, result = -math.inf, {}
    while not result or result["timesteps_total"] < max_steps:
        result = algo.train()
        best = max(best, result["episode_reward_mean"])
        if best >= bar:
            break
    return best, result


@pytest.mark.timeout(300)
@pytest.mark.parametrize("make, bar, max_steps", [
    (sac_config, -600, 8000), (td3_config, -600, 8000), (ddpg_config, -600, 8000)],
    ids=["SAC", "TD3", "DDPG"])
def test_learns_pendulum_past_a_low_bar(make, bar, max_steps):
    # Random or zero torques score about -1200 on Pendulum (a lucky 5 episodes of a
    # near-zero actor reach -900); -200 is solved (the benchmark's bar). Each crosses -600
    # after about 4-7k env steps.
    with make().build() as algo:
        best, result = train_until(algo, bar, max_steps)
        assert best >= bar, f"best mean return {best} after {result['timesteps_total']} steps"
        stats = result["info"]["learner"]["default_policy"]
        assert math.isfinite(stats["critic_loss"]) and stats["num_grad_updates"] > 0
        assert result["replay_buffer_num_transitions"] > 0


def test_a_checkpoint_keeps_targets_optimizers_and_alpha(tmp_path):
    config = sac_config().training(num_steps_sampled_before_learning_starts=100)
    config.reporting(min_sample_timesteps_per_iteration=300)
    with config.build() as algo:
        algo.train()
        policy = algo.get_policy()
        saved = {"target": {k: v.clone() for k, v in policy.target_model.state_dict().items()},
                 "model": {k: v.clone() for k, v in policy.model.state_dict().items()},
                 "optimizer": policy.optimizer.state_dict(), "state": dict(policy.state)}
        assert float(policy.model.log_alpha.detach()) != 0.0  # alpha moved from initial_alpha 1.0
        path = algo.save(tmp_path / "ckpt")
    with sac_config().build() as fresh:
        restored = fresh.get_policy()
        assert not torch.equal(restored.model.log_alpha, saved["model"]["log_alpha"])
        fresh.restore(path)
        for k, v in saved["target"].items():
            torch.testing.assert_close(restored.target_model.state_dict()[k], v, msg=k)
        for k, v in saved["model"].items():
            torch.testing.assert_close(restored.model.state_dict()[k], v, msg=k)
        for mine, theirs in zip(restored.optimizer.state_dict()["optimizers"],
                                saved["optimizer"]["optimizers"]):
            for index, entry in theirs["state"].items():
                torch.testing.assert_close(mine["state"][index]["exp_avg"], entry["exp_avg"])
        assert restored.state["num_grad_steps"] == saved["state"]["num_grad_steps"] > 0
        # explore=False: the squashed Gaussian's mode, the same from the checkpoint alone.
        obs = [1.0, 0.0, 0.5]
        action = fresh.compute_single_action(obs, explore=False)
        assert action == pytest.approx(fresh.compute_single_action(obs, explore=False))
        alone = InferencePolicy.from_checkpoint(path)
        assert alone.compute_single_action(obs, explore=False) == pytest.approx(action)
        fresh.train()  # and it trains on from there


def test_discrete_sac_trains_on_cartpole():
    net = {"fcnet_hiddens": [32, 32]}
    config = (SACConfig().environment("CartPole-v1")
              .training(q_model_config=net, policy_model_config=net, training_intensity=64,
                        train_batch_size=64, num_steps_sampled_before_learning_starts=200)
              .env_runners(rollout_fragment_length=4)
              .reporting(min_sample_timesteps_per_iteration=400))
    with config.build() as algo:
        result = algo.train()
        stats = result["info"]["learner"]["default_policy"]
        assert stats["num_grad_updates"] > 0 and math.isfinite(stats["critic_loss"])
        assert stats["target_entropy"] == pytest.approx(0.98 * math.log(2))
        assert algo.compute_single_action([0.0, 0.0, 0.0, 0.0]) in (0, 1)


@pytest.mark.parametrize("config", [DDPGConfig, TD3Config])
def test_a_continuous_algorithm_on_a_discrete_space_is_one_line_naming_what_fits(config,
                                                                                tmp_path):
    with pytest.raises(ConfigError, match=r"needs a Box .*Discrete\(2\).* use SAC, DQN"):
        config().environment("CartPole-v1").build()
    name = config.__name__.removesuffix("Config")
    run = subprocess.run([sys.executable, "-m", "rlmesh.cli.main", "train", "--run", name,
                          "--env", "CartPole-v1", "--local-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=90, cwd=REPO)
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert f"{name} needs a Box" in lines[0] and "SAC" in lines[0]

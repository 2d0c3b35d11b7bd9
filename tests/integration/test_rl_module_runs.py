"""RLModules in real runs (runner processes, sockets, gymnasium envs): a user's module
trains PPO and APPO on CartPole, a stateful one StatelessCartPole, two modules a multi-agent
run; runners act with forward_exploration (forward_inference when not exploring); a run's
checkpoint gives the trained module back (RLModule.from_checkpoint), restores, rolls out and
exports; a module missing what the algorithm needs stops build() in one line.

The thresholds are low (the full runs: examples/*_rl_module.py, docs/benchmarks.md)."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from examples import custom_rl_module, lstm_rl_module, multi_rl_module
from rlmesh.algorithms import Algorithm
from rlmesh.algorithms.ppo import PPOConfig
from rlmesh.core.learner import Learner
from rlmesh.core.columns import Columns
from rlmesh.core.rl_module.rl_module import RLModule, RLModuleSpec
from rlmesh.core.rl_module.torch import TorchRLModule


class RewardsActionOne(gym.Env):
    """Reward 1 for action 1, 0 for action 0; 10 steps an episode."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, env_config=None):
        self.t = 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(4, np.float32), float(action), False, self.t >= 10, {}


class ExploresOneInfersZero(TorchRLModule):
    """forward_exploration always picks action 1, forward_inference action 0."""

    def setup(self):
        self.pi = nn.Linear(4, 2)
        self.vf = nn.Linear(4, 1)

    def _forward_exploration(self, batch, **kwargs):
        return {Columns.ACTION_DIST_INPUTS: torch.tensor([-30.0, 30.0]).expand(len(batch["obs"]), 2)}

    def _forward_inference(self, batch, **kwargs):
        return {Columns.ACTION_DIST_INPUTS: torch.tensor([30.0, -30.0]).expand(len(batch["obs"]), 2)}

    def _forward_train(self, batch, **kwargs):
        obs = batch[Columns.OBS]
        return {Columns.ACTION_DIST_INPUTS: self.pi(obs), Columns.VF_PREDS: self.vf(obs).squeeze(-1)}


class NoValueOutput(TorchRLModule):
    def setup(self):
        self.pi = nn.Linear(4, 2)

    def _forward(self, batch, **kwargs):
        return {Columns.ACTION_DIST_INPUTS: self.pi(batch[Columns.OBS])}


def test_ppo_trains_a_users_module_on_cartpole():
    result = custom_rl_module.train(custom_rl_module.config("PPO"), 150.0, max_env_steps=60_000,
                                    log=False)
    assert result["episode_reward_mean"] >= 150, result["episode_reward_mean"]


def test_appo_trains_a_users_module_on_cartpole():
    result = custom_rl_module.train(custom_rl_module.config("APPO"), 100.0,
                                    max_env_steps=150_000, log=False)
    assert result["episode_reward_mean"] >= 100, result["episode_reward_mean"]


def test_a_stateful_module_learns_to_remember_velocities():
    result = custom_rl_module.train(lstm_rl_module.config(), 100.0, max_env_steps=60_000,
                                    log=False)
    assert result["episode_reward_mean"] >= 100, result["episode_reward_mean"]


def test_two_modules_train_the_multi_agent_run():
    algo = multi_rl_module.config().build()
    try:
        first = algo.train()
        for _ in range(7):
            result = algo.train()
        widths = {pid: algo.get_policy(pid).model.module.encoder[0].out_features
                  for pid in ("p0", "p1")}
    finally:
        algo.stop()
    assert widths == {"p0": 64, "p1": 32}
    assert set(result["policy_reward_mean"]) == {"p0", "p1"}
    assert result["episode_reward_mean"] > first["episode_reward_mean"]


def test_runners_explore_with_forward_exploration_and_evaluate_with_forward_inference():
    config = (PPOConfig().environment(RewardsActionOne)
              .env_runners(num_env_runners=1, num_envs_per_env_runner=2)
              .training(train_batch_size=200, minibatch_size=100, num_epochs=1)
              .evaluation(evaluation_interval=1, evaluation_duration=4,
                          evaluation_config={"explore": False})
              .rl_module(rl_module_spec=RLModuleSpec(module_class=ExploresOneInfersZero)))
    algo = config.build()
    try:
        result = algo.train()
    finally:
        algo.stop()
    assert result["episode_reward_mean"] == 10.0  # every sampled action was 1
    assert result["evaluation"]["episode_reward_mean"] == 0.0  # every greedy action was 0


def test_a_module_without_values_stops_build_in_one_line(no_children_left):
    config = (PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=1)
              .rl_module(rl_module_spec=RLModuleSpec(module_class=NoValueOutput)))
    with pytest.raises(Exception) as err:
        config.build()
    message = str(err.value).strip().splitlines()
    assert len(message) == 1 and "NoValueOutput gives no values" in message[0], message
    assert "compute_values" in message[0]


def test_a_module_checkpoint_restores_rolls_out_and_exports(tmp_path):
    config = (custom_rl_module.config("PPO")
              .env_runners(num_env_runners=1, num_envs_per_env_runner=2, sample_async=False)
              .training(train_batch_size=200, minibatch_size=100, num_epochs=2))
    algo = config.build()
    try:
        algo.train()
        path = str(algo.save(tmp_path / "ckpt"))
        obs = np.random.default_rng(0).uniform(-0.05, 0.05, (8, 4)).astype(np.float32)
        greedy = [int(algo.compute_single_action(o, explore=False)) for o in obs]
        algo.export_policy_model(str(tmp_path / "ts"))
        algo.export_policy_model(str(tmp_path / "onnx"), onnx=17)
    finally:
        algo.stop()
    # RLlib's layout: the trained module, built without the algorithm
    module = RLModule.from_checkpoint(f"{path}/learner_group/learner/rl_module/default_policy")
    assert isinstance(module, custom_rl_module.MLPActorCritic)
    with torch.no_grad():
        logits = module.forward_inference({Columns.OBS: torch.as_tensor(obs)})[
            Columns.ACTION_DIST_INPUTS]
    assert logits.argmax(-1).tolist() == greedy
    # the algorithm restores (the module's class is outside rlmesh: trust_code)
    restored = Algorithm.from_checkpoint(path, trust_code=True)
    try:
        assert [int(restored.compute_single_action(o, explore=False)) for o in obs] == greedy
    finally:
        restored.stop()
    ts = torch.jit.load(str(tmp_path / "ts" / "model.pt"))
    assert ts(torch.as_tensor(obs))[0].argmax(-1).tolist() == greedy
    assert (tmp_path / "onnx" / "model.onnx").is_file()
    out = subprocess.run([sys.executable, "-m", "rlmesh", "rollout", path, "--episodes", "2",
                          "--trust-code"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.lower().count("episode") >= 2, out.stdout


class ModuleLossLearner(Learner):
    """A user's loss on a module run, written as RLlib's: ``self.module[module_id]`` is the
    RLModule, ``fwd_out`` its forward_train output."""

    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        module = self.module[module_id]
        if not isinstance(module, custom_rl_module.MLPActorCritic):
            raise TypeError(f"self.module[{module_id!r}] is {type(module).__name__}")
        loss = super().compute_loss_for_module(module_id=module_id, config=config, batch=batch,
                                               fwd_out=fwd_out)
        embeddings = fwd_out[Columns.EMBEDDINGS]
        self.metrics.log_value((module_id, "embedding_norm"), float(embeddings.detach().norm(dim=-1).mean()))
        return loss + 1e-4 * embeddings.pow(2).mean()


def test_a_users_learner_reads_the_module_and_its_outputs():
    config = (custom_rl_module.config("PPO")
              .env_runners(num_env_runners=1, num_envs_per_env_runner=2, sample_async=False)
              .training(train_batch_size=200, minibatch_size=100, num_epochs=2,
                        learner_class=ModuleLossLearner))
    algo = config.build()
    try:
        result = algo.train()
    finally:
        algo.stop()
    assert result["learners"]["default_policy"]["embedding_norm"] > 0

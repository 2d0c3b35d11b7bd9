"""Every space kind end to end, with real runner processes: PPO learns MiniGrid's Dict
observations with the default conv encoder, a MultiDiscrete-action and a Tuple-action task;
custom models as classes; nested compute_single_action; an observation that does not
match its space stops the run with one message naming it."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from rlmesh.algorithms import PPOConfig
from rlmesh.models import register_custom_model

pytest.importorskip("minigrid", reason="MiniGrid tests need the minigrid package: "
                    "pip install 'rlmesh[envs]'")

ENVS = "tests.integration.spaces_envs"


def learn(config: PPOConfig, target: float, max_steps: int) -> tuple[float, int]:
    """Train until the mean return reaches ``target`` or ``max_steps`` are sampled; the
    best mean return and the steps it took."""
    best, steps = -math.inf, 0
    with config.build() as algo:
        while steps < max_steps:
            result = algo.train()
            steps = result["timesteps_total"]
            best = max(best, result["episode_reward_mean"])
            if best >= target:
                break
    return best, steps


def test_ppo_learns_minigrid_empty_5x5_from_dict_observations():
    # image (7x7x3 uint8, default conv stack) + direction (one-hot); mission dropped.
    config = (PPOConfig().environment(f"{ENVS}:make_minigrid")
              .env_runners(num_env_runners=1, num_envs_per_env_runner=8)
              .training(lr=1e-3, train_batch_size=2048, minibatch_size=256, num_epochs=4,
                        entropy_coeff=0.01, model={"fcnet_hiddens": [64]})
              .debugging(seed=0))
    best, steps = learn(config, 0.9, 200_000)
    assert best >= 0.9, f"PPO reached a mean return of {best} on MiniGrid-Empty-5x5 in {steps} steps"


def test_ppo_learns_multidiscrete_actions():
    config = (PPOConfig().environment(f"{ENVS}:MultiDiscreteTargetEnv")
              .env_runners(num_env_runners=1, num_envs_per_env_runner=4)
              .training(lr=3e-3, train_batch_size=1024, minibatch_size=256, num_epochs=4,
                        model={"fcnet_hiddens": [32]})
              .debugging(seed=0))
    best, steps = learn(config, 7.0, 60_000)
    assert best >= 7.0, f"best mean return {best} of 8 after {steps} steps (uniform: ~2.3)"


def test_ppo_learns_tuple_actions_and_acts_with_nested_actions():
    config = (PPOConfig().environment(f"{ENVS}:TupleTargetEnv")
              .env_runners(num_env_runners=1, num_envs_per_env_runner=4)
              .training(lr=3e-3, train_batch_size=1024, minibatch_size=256, num_epochs=4,
                        model={"fcnet_hiddens": [32]})
              .debugging(seed=0))
    best, steps = -math.inf, 0
    with config.build() as algo:
        while steps < 100_000 and best < 5.0:
            result = algo.train()
            steps, best = result["timesteps_total"], max(best, result["episode_reward_mean"])
        choice, point = algo.compute_single_action(np.ones(1, np.float32))
    assert best >= 5.0, f"best mean return {best} of 8 after {steps} steps (random: ~-3)"
    assert choice == 2 and isinstance(choice, int)
    assert point.shape == (2,) and np.linalg.norm(point - [0.5, -0.5]) < 0.5


class DictObsNet(nn.Module):
    """A custom model of MiniGrid's Dict observations: it gets the dict of tensors."""

    def __init__(self, obs_space, action_space, num_outputs, model_config):
        super().__init__()
        width = model_config["custom_model_config"].get("width", 16)
        self.body = nn.Sequential(nn.Linear(7 * 7 * 3 + 4, width), nn.Tanh())
        self.pi, self.vf = nn.Linear(width, num_outputs), nn.Linear(width, 1)

    def forward(self, obs):
        direction = nn.functional.one_hot(obs["direction"].long(), 4).float()
        x = self.body(torch.cat([obs["image"].flatten(1).float() / 10, direction], -1))
        return self.pi(x), self.vf(x).squeeze(-1)


register_custom_model("dict_obs_net", DictObsNet)


@pytest.mark.parametrize("custom_model", [DictObsNet, "dict_obs_net"])
def test_custom_model_as_a_class_or_registered_name_trains_on_dict_observations(custom_model):
    config = (PPOConfig().environment(f"{ENVS}:make_minigrid")
              .env_runners(num_env_runners=1, num_envs_per_env_runner=2)
              .training(train_batch_size=128, minibatch_size=64, num_epochs=1,
                        model={"custom_model": custom_model, "custom_model_config": {"width": 8}})
              .debugging(seed=0))
    with config.build() as algo:
        result = algo.train()
        obs = make_obs()
        action = algo.compute_single_action(obs)
        assert isinstance(action, int) and 0 <= action < 7
        assert result["timesteps_total"] >= 128
        assert algo.get_policy().model.model.body[0].out_features == 8


def make_obs() -> dict:
    from tests.integration.spaces_envs import make_minigrid

    env = make_minigrid()
    obs, _ = env.reset(seed=0)
    env.close()
    return obs


class WrongShapeEnv(gym.Env):
    """Declares a Dict observation with a (3,) vector, returns (4,) from its third step."""

    observation_space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (3,), np.float32),
                                         "flag": gym.spaces.Discrete(2)})
    action_space = gym.spaces.Discrete(2)

    def __init__(self, env_config=None):
        self.t = 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return {"pos": np.zeros(3, np.float32), "flag": 0}, {}

    def step(self, action):
        self.t += 1
        size = 4 if self.t >= 3 else 3
        return {"pos": np.zeros(size, np.float32), "flag": 1}, 0.0, False, False, {}


def test_observation_not_matching_its_space_stops_the_run_with_one_message():
    config = (PPOConfig().environment(WrongShapeEnv)
              .env_runners(num_env_runners=1, num_envs_per_env_runner=1)
              .training(train_batch_size=32, minibatch_size=32, num_epochs=1))
    with config.build() as algo:
        with pytest.raises(Exception) as info:
            algo.train()
    message = str(info.value).splitlines()[0]  # then the runner's traceback, for debugging
    assert "'pos'" in message and "(3,)" in message and "(4,)" in message and "float32" in message
    assert message.count("does not match its space") == 1
    assert "mat1" not in str(info.value) and "torch" not in str(info.value)


def test_policy_client_sends_dict_observations_and_gets_tuple_actions():
    import threading

    from rlmesh.client import PolicyClient

    obs_space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (3,), np.float32),
                                 "flag": gym.spaces.Discrete(2)})
    action_space = gym.spaces.Tuple(
        (gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,), np.float32)))
    config = (PPOConfig().environment(observation_space=obs_space, action_space=action_space)
              .env_runners(policy_server_address="tcp://127.0.0.1:0", num_env_runners=1,
                           policy_server_idle_timeout_s=5.0)
              .training(train_batch_size=64, minibatch_size=64, num_epochs=1,
                        model={"fcnet_hiddens": [8]}))
    actions, errors = [], []
    with config.build() as algo:
        address = algo.env_runners.foreach_env_runner("get_address")[0]

        def simulator():
            try:
                with PolicyClient(address) as client:
                    for _ in range(10):
                        eid = client.start_episode()
                        for _ in range(10):
                            action = client.get_action(eid, obs_space.sample())
                            actions.append(action)
                            client.log_returns(eid, 1.0)
                        client.log_action(eid, obs_space.sample(), action_space.sample())
                        client.end_episode(eid, obs_space.sample())
            except Exception as e:  # reported below
                errors.append(e)

        thread = threading.Thread(target=simulator)
        thread.start()
        result = algo.train()
        thread.join(60)
    assert not errors, errors
    assert result["timesteps_total"] >= 64
    choice, point = actions[0]
    assert 0 <= int(choice) < 3 and np.asarray(point).shape == (2,)

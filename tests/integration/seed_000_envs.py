"""The user's code of seed 000's examples, in a module light to import (the runners import
it: the test module would bring torch into each): the curriculum env, a CartPole subclass
with ``set_phase`` inside a gym.Wrapper of the user's that has its own ``set_phase`` (which
must be the one called: the env is reached as the user built it, not ``env.unwrapped``),
and the callback functions of one info dict."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control import CartPoleEnv


class PhasedCartPole(CartPoleEnv):
    def __init__(self) -> None:
        super().__init__()
        self.phase = 0

    def set_phase(self, phase: int) -> None:
        self.phase = phase


class CurriculumEnv(gym.Wrapper):
    """What the seed calls ``YourEnv``: built from the env config, phase set from outside."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__(gym.wrappers.TimeLimit(PhasedCartPole(), max_episode_steps=200))
        self.wrapper_phase = None

    def set_phase(self, phase: int) -> None:
        self.wrapper_phase = phase
        self.env.unwrapped.set_phase(phase)

    def phases(self) -> list:
        """[the wrapper's phase, the env's inside it]."""
        return [self.wrapper_phase, self.env.unwrapped.phase]


# --- the callbacks of "Callbacks and Custom Metrics": pole angles per episode

def on_episode_start(info):
    episode = info["episode"]
    assert set(info) == {"env", "episode", "policy"}
    episode.user_data["pole_angles"] = []


def on_episode_step(info):
    episode = info["episode"]
    episode.user_data["pole_angles"].append(abs(episode.last_observation_for()[2]))


def on_episode_end(info):
    episode = info["episode"]
    angles = episode.user_data["pole_angles"]
    assert len(angles) == episode.length and episode.episode_id >= 0
    episode.custom_metrics["pole_angle"] = np.mean(angles)
    episode.hist_data["pole_angles"] = angles


def on_train_result(info):
    info["result"]["trainer_name"] = info["trainer"].__name__
    info["result"]["episodes_seen_by_callback"] = info["result"]["episodes_this_iter"]


# --- approach 2 of the curriculum: the phase set from on_train_result

def set_phase_on_train_result(info):
    result = info["result"]
    phase = result["training_iteration"]
    trainer = info["trainer"]
    trainer.workers.foreach_worker(lambda ev: ev.foreach_env(lambda env: env.set_phase(phase)))
    result["phases"] = trainer.workers.foreach_worker(
        lambda ev: ev.foreach_env(lambda env: env.phases()))

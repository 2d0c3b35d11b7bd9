"""Envs written the way RLlib's docs and examples write them: a ``gym.Env`` taking an
``EnvContext`` (``config["key"]``, ``config.worker_index`` ...), and ``MultiAgentEnv``
subclasses in each of RLlib's idioms for agents and spaces. Every copy writes down which
worker and vector index it was made with, in ``config["record_dir"]``."""

from __future__ import annotations

import json
import os
import uuid

import gymnasium as gym
import numpy as np

from rlmesh.env.multi_agent_env import MultiAgentEnv


def record(config, kind: str) -> None:
    """One JSON file per env copy: the EnvContext it got, under ``config["record_dir"]``."""
    directory = config.get("record_dir")
    if directory:
        seen = {"kind": kind, "worker_index": config.worker_index,
                "vector_index": config.vector_index, "num_workers": config.num_workers,
                "env_config": {k: v for k, v in config.items() if k != "record_dir"},
                "pid": os.getpid()}
        with open(os.path.join(directory, f"{kind}-{uuid.uuid4().hex}.json"), "w") as f:
            json.dump(seen, f)


class SimpleCorridor(gym.Env):
    """RLlib's custom-env example shape: walk right to the end of a corridor of
    ``config["corridor_length"]`` cells."""

    def __init__(self, config):
        self.end_pos = config["corridor_length"]
        self.worker_index, self.vector_index = config.worker_index, config.vector_index
        self.cur_pos = 0
        self.action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.spaces.Box(0.0, self.end_pos, shape=(1,), dtype=np.float32)
        record(config, "corridor")

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.cur_pos = 0
        return np.array([self.cur_pos], np.float32), {"worker_index": self.worker_index,
                                                       "vector_index": self.vector_index}

    def step(self, action):
        self.cur_pos = max(0, self.cur_pos + (1 if action == 1 else -1))
        done = self.cur_pos >= self.end_pos
        return (np.array([self.cur_pos], np.float32), 1.0 if done else -0.1, done, False,
                {"worker_index": self.worker_index, "vector_index": self.vector_index})


def corridor_creator(env_config):
    """A creator for ``register_env``, as RLlib's ``lambda config: SimpleCorridor(config)``."""
    return SimpleCorridor(env_config)


class _TwoAgentGame(MultiAgentEnv):
    """Two agents acting together for ``config.get("length", 10)`` steps; each is rewarded
    for choosing action 1. Subclasses differ only in how they declare agents and spaces."""

    def _start(self, config, ids) -> None:
        self.ids, self.length, self.t = list(ids), int(config.get("length", 10)), 0
        record(config, type(self).__name__)

    def _obs(self):
        return {a: self.get_observation_space(a).sample() * 0 for a in self.ids}

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self._obs(), {a: {} for a in self.ids}

    def step(self, action_dict):
        self.t += 1
        rewards = {a: float(np.asarray(action_dict[a]).reshape(-1)[0] == 1) for a in action_dict}
        done = self.t >= self.length
        return (self._obs(), rewards, {"__all__": done}, {"__all__": False},
                {a: {} for a in self.ids})


class ClassicAgentIdsEnv(_TwoAgentGame):
    """RLlib's older idiom: ``super().__init__()`` first, ``self._agent_ids`` a set, one
    ``self.observation_space`` / ``self.action_space`` that every agent shares."""

    def __init__(self, config=None):
        super().__init__()
        config = config if config is not None else {}
        self._agent_ids = {"blue", "red"}
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._start(config, sorted(self._agent_ids))


class PreferredFormatEnv(_TwoAgentGame):
    """RLlib's "preferred format": ``self.observation_space`` / ``self.action_space`` are
    Dicts keyed by agent id (each agent its own space); the agents given as ``self.agents``."""

    def __init__(self, config=None):
        super().__init__()
        config = config if config is not None else {}
        self.agents = ["small", "large"]
        self._obs_space_in_preferred_format = True
        self._action_space_in_preferred_format = True
        self.observation_space = gym.spaces.Dict({
            "small": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
            "large": gym.spaces.Box(-1.0, 1.0, (5,), np.float32)})
        self.action_space = gym.spaces.Dict({"small": gym.spaces.Discrete(2),
                                             "large": gym.spaces.Discrete(3)})
        self._start(config, self.agents)


class OverriddenSpacesEnv(_TwoAgentGame):
    """Spaces from overridden ``get_observation_space`` / ``get_action_space``; int agent
    ids in ``possible_agents``."""

    def __init__(self, config=None):
        super().__init__()
        config = config if config is not None else {}
        self.possible_agents = [0, 1]
        self._start(config, self.possible_agents)

    def get_observation_space(self, agent_id):
        return gym.spaces.Box(-1.0, 1.0, (4 + agent_id,), np.float32)

    def get_action_space(self, agent_id):
        return gym.spaces.Discrete(2 + agent_id)


class NewStyleSpacesEnv(_TwoAgentGame):
    """RLlib's newer idiom: ``possible_agents`` and the ``observation_spaces`` /
    ``action_spaces`` dicts."""

    def __init__(self, config=None):
        super().__init__()
        config = config if config is not None else {}
        self.possible_agents = ["p", "q"]
        self.observation_spaces = {a: gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
                                   for a in self.possible_agents}
        self.action_spaces = {a: gym.spaces.Discrete(2) for a in self.possible_agents}
        self._start(config, self.possible_agents)


def policy_per_agent(agent_id, episode, worker=None, **kwargs):
    """RLlib's mapping-function signature: each agent its own policy."""
    return f"policy_{agent_id}"

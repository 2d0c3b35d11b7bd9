"""Multi-agent envs and mapping functions for the multi-agent integration tests (importable,
so runner processes find them)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from rlmesh.env import ALL, MultiAgentEnv, make_multi_agent

BOX = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


class EarlyLeaver(MultiAgentEnv):
    """'stayer' acts for 20 steps; 'leaver' terminates after 3 steps and is never seen again
    in the episode. Reward 1 per step for each, so the returns are 20 and 3."""

    possible_agents = ["stayer", "leaver"]
    observation_spaces = {"stayer": BOX, "leaver": BOX}
    action_spaces = {"stayer": gym.spaces.Discrete(2), "leaver": gym.spaces.Discrete(2)}

    def __init__(self, config=None):
        self.t = 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return {a: self._obs() for a in self.possible_agents}, {}

    def _obs(self):
        return np.array([self.t / 20, 0.5], np.float32)

    def step(self, actions):
        self.t += 1
        obs = {a: self._obs() for a in actions}
        rewards = {a: 1.0 for a in actions}
        terms = {"leaver": True} if "leaver" in actions and self.t == 3 else {}
        terms[ALL] = self.t == 20
        return obs, rewards, terms, {ALL: False}, {}


def make_early_leaver(env_config):
    return EarlyLeaver(env_config)


def by_agent(agent_id, episode, **kwargs):
    return agent_id


def to_ghost(agent_id, episode, **kwargs):
    return "ghost"


def cartpole_two(agent_id, episode, **kwargs):
    return f"p{agent_id % 2}"


def two_policies_then_ghost(agent_id, episode, **kwargs):
    """Agents 0 and 1 act with p0 and p1; any other agent is mapped to an unknown id."""
    return f"p{agent_id}" if agent_id in (0, 1) else "ghost"


_Pendulums = make_multi_agent("Pendulum-v1")
MARKED_PENDULUM_OBS = gym.spaces.Box(np.array([-1, -1, -8, 0], np.float32),
                                     np.array([1, 1, 8, 1], np.float32))


class MarkedPendulums(_Pendulums):
    """Two independent Pendulum-v1 agents (0 and 1) whose observations end with the agent's
    index, so whose transitions a policy's replay buffer holds can be read off them."""

    def __init__(self, config=None):
        super().__init__(config)
        self.observation_spaces = {i: MARKED_PENDULUM_OBS for i in self.possible_agents}

    def reset(self, *, seed=None, options=None):
        obs, infos = super().reset(seed=seed, options=options)
        return self._mark(obs), infos

    def step(self, actions):
        obs, *rest = super().step(actions)
        return (self._mark(obs), *rest)

    @staticmethod
    def _mark(obs):
        return {i: np.append(o, np.float32(i)).astype(np.float32) for i, o in obs.items()}


def make_marked_pendulums(env_config):
    return MarkedPendulums(env_config)


def pendulum_per_agent(agent_id, episode, **kwargs):
    return f"p{agent_id}"

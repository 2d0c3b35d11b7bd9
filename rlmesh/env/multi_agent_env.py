"""``MultiAgentEnv``: one env holding several agents, each with its own spaces, stepped with
a dict of actions and answering dicts keyed by agent id (``"__all__"`` ends the episode),
and ``make_multi_agent``, which turns a single-agent env into N independent copies."""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym

ALL = "__all__"


class MultiAgentEnv(gym.Env):
    """RLlib's MultiAgentEnv contract:

    - ``reset(seed=None, options=None) -> (obs, infos)``: dicts keyed by agent id, holding
      the agents that act next;
    - ``step(actions) -> (obs, rewards, terminateds, truncateds, infos)``: ``actions`` holds
      an action for each agent that got an observation; the answer holds an observation for
      each agent that acts next, a reward for any agent (summed into its next step),
      ``terminateds``/``truncateds`` per agent that is done and under ``"__all__"`` for the
      episode. An agent may join (first observation) or leave (done) mid-episode.

    Subclasses set ``possible_agents`` and ``observation_spaces`` / ``action_spaces``
    (dicts keyed by agent id). Agent ids are str or int, the same type throughout.
    """

    possible_agents: list[Any] = []
    observation_spaces: dict[Any, gym.Space] = {}
    action_spaces: dict[Any, gym.Space] = {}

    def get_observation_space(self, agent_id: Any) -> gym.Space:
        return self.observation_spaces[agent_id]

    def get_action_space(self, agent_id: Any) -> gym.Space:
        return self.action_spaces[agent_id]

    @property
    def observation_space(self) -> gym.Space:  # type: ignore[override]
        """A Dict of every agent's space (the ``gym.Env`` attribute; use the per-agent ones)."""
        return gym.spaces.Dict({str(a): self.get_observation_space(a) for a in self.possible_agents})

    @property
    def action_space(self) -> gym.Space:  # type: ignore[override]
        return gym.spaces.Dict({str(a): self.get_action_space(a) for a in self.possible_agents})


def is_multi_agent(env: Any) -> bool:
    return isinstance(getattr(env, "unwrapped", env), MultiAgentEnv) or isinstance(env, MultiAgentEnv)


def make_multi_agent(env_name_or_creator: str | Callable[[dict], gym.Env]) -> type[MultiAgentEnv]:
    """A MultiAgentEnv class of ``env_config["num_agents"]`` (default 2) independent copies of
    a single-agent env (a gymnasium id or a creator), agents ``0..N-1``. Each agent leaves
    when its copy's episode ends; the episode ends when every copy's has (RLlib's
    ``make_multi_agent``). Define the class at module level to name it by import path:
    ``MultiAgentCartPole = make_multi_agent("CartPole-v1")``."""

    class IndependentCopies(MultiAgentEnv):
        def __init__(self, config: dict | None = None) -> None:
            config = dict(config or {})
            n = int(config.pop("num_agents", 2))
            if callable(env_name_or_creator):
                self.envs = [env_name_or_creator(config) for _ in range(n)]
            else:
                self.envs = [gym.make(env_name_or_creator, **config) for _ in range(n)]
            self.possible_agents = list(range(n))
            self.observation_spaces = {i: e.observation_space for i, e in enumerate(self.envs)}
            self.action_spaces = {i: e.action_space for i, e in enumerate(self.envs)}
            self.done: set[int] = set()

        def reset(self, *, seed: int | None = None, options: dict | None = None):
            self.done = set()
            obs, infos = {}, {}
            for i, env in enumerate(self.envs):
                obs[i], infos[i] = env.reset(seed=None if seed is None else seed + i,
                                             options=options)
            return obs, infos

        def step(self, actions: dict[Any, Any]):
            obs, rewards, terms, truncs, infos = {}, {}, {}, {}, {}
            for i, action in actions.items():
                o, r, te, tr, info = self.envs[i].step(action)
                rewards[i], terms[i], truncs[i], infos[i] = r, te, tr, info
                if te or tr:
                    self.done.add(i)
                obs[i] = o  # the final observation of a leaving agent, for bootstrapping
            terms[ALL] = len(self.done) == len(self.envs)
            truncs[ALL] = False
            return obs, rewards, terms, truncs, infos

        def close(self) -> None:
            for env in self.envs:
                env.close()

    name = env_name_or_creator if isinstance(env_name_or_creator, str) else getattr(
        env_name_or_creator, "__name__", "env")
    IndependentCopies.__name__ = IndependentCopies.__qualname__ = f"MultiAgent[{name}]"
    return IndependentCopies

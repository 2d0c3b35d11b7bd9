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

    The agents: ``possible_agents`` (a list of ids); when a subclass leaves it unset, its
    ``agents`` or RLlib's older ``_agent_ids`` (a set), else the keys of
    ``observation_spaces``. Agent ids are str or int, the same type throughout.

    The spaces, in any of RLlib's idioms: ``observation_spaces`` / ``action_spaces`` (dicts
    keyed by agent id); or ``self.observation_space = ...`` / ``self.action_space = ...``
    set in ``__init__``, one space every agent shares or a ``gym.spaces.Dict`` keyed by
    agent ids (RLlib's "preferred format": an agent whose id is a key gets that space); or
    ``get_observation_space(agent_id)`` / ``get_action_space(agent_id)`` overridden.
    Calling ``super().__init__()`` first, as RLlib's examples do, is fine.
    """

    observation_spaces: dict[Any, gym.Space] | None = None
    action_spaces: dict[Any, gym.Space] | None = None
    agents: list[Any] = []  # the agents in the episode now (optional)

    def get_observation_space(self, agent_id: Any) -> gym.Space:
        return self._space_of(agent_id, "observation")

    def get_action_space(self, agent_id: Any) -> gym.Space:
        return self._space_of(agent_id, "action")

    def _space_of(self, agent_id: Any, kind: str) -> gym.Space:
        per_agent = getattr(self, f"{kind}_spaces")
        if per_agent:
            if agent_id not in per_agent:
                raise KeyError(f"{type(self).__name__}.{kind}_spaces has no space for agent "
                               f"{agent_id!r} (it has {sorted(map(str, per_agent))})")
            return per_agent[agent_id]
        shared = self._shared_space(kind)
        if shared is None:
            raise ValueError(
                f"{type(self).__name__} gives no {kind} space for agent {agent_id!r}: set "
                f"self.{kind}_spaces = {{agent_id: space}} or self.{kind}_space = space in "
                f"__init__, or override get_{kind}_space(agent_id)")
        if isinstance(shared, gym.spaces.Dict) and agent_id in shared.spaces:
            return shared.spaces[agent_id]  # RLlib's preferred format: keyed by agent id
        return shared

    # ``possible_agents`` and the gym.Env space attributes are properties with setters, so
    # that RLlib's idiom of assigning them in __init__ works; a class attribute of a
    # subclass (``possible_agents = ["a", "b"]``) overrides the property as usual.

    @property
    def possible_agents(self) -> list[Any]:
        """Every agent that may appear (see the class doc for where it comes from)."""
        given = self.__dict__.get("_possible_agents")
        if given:
            return given
        if self.agents:
            return list(self.agents)
        ids = self.__dict__.get("_agent_ids")
        if ids:
            return sorted(ids, key=str) if isinstance(ids, (set, frozenset)) else list(ids)
        return list(self.observation_spaces or self.action_spaces or [])

    @possible_agents.setter
    def possible_agents(self, value: Any) -> None:
        self.__dict__["_possible_agents"] = list(value)

    @property
    def observation_space(self) -> gym.Space:  # type: ignore[override]
        """The space set in ``__init__``, else a Dict of every agent's space (use the
        per-agent ones: ``get_observation_space``)."""
        return self._env_space("observation")

    @observation_space.setter
    def observation_space(self, space: gym.Space) -> None:
        self.__dict__["_observation_space"] = space

    @property
    def action_space(self) -> gym.Space:  # type: ignore[override]
        return self._env_space("action")

    @action_space.setter
    def action_space(self, space: gym.Space) -> None:
        self.__dict__["_action_space"] = space

    def _shared_space(self, kind: str) -> gym.Space | None:
        """The space set as ``self.<kind>_space`` (or as a class attribute), else None."""
        shared = self.__dict__.get(f"_{kind}_space")
        if shared is None:
            declared = getattr(type(self), f"{kind}_space", None)
            shared = declared if isinstance(declared, gym.Space) else None
        return shared

    def _env_space(self, kind: str) -> gym.Space:
        shared = self._shared_space(kind)
        if shared is not None:
            return shared
        get = getattr(self, f"get_{kind}_space")  # a subclass may override it
        return gym.spaces.Dict({str(a): get(a) for a in self.possible_agents})


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

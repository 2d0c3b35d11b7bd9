"""PettingZoo envs as ``MultiAgentEnv``s: ``ParallelPettingZooEnv`` (the Parallel API, every
agent acts each step) and ``PettingZooEnv`` (the AEC API, turn-based: one agent acts per
step, its reward arriving over the others' turns). pettingzoo is the ``multiagent`` extra."""

from __future__ import annotations

import difflib
import importlib
from typing import Any

from rlmesh.env.multi_agent_env import ALL, MultiAgentEnv
from rlmesh.extras import require
from rlmesh.runtime.import_path import user_module


def _module(name: str) -> Any:
    """A PettingZoo env module by name: 'classic.rps_v2', 'pettingzoo.classic.rps_v2', or an
    import path of one's own ('my_pkg.my_env'). PettingZoo's own families come first, found
    on disk before anything is imported (``user_module``: the same rule the trust check of
    checkpoints applies, so that a module it lets through is the one imported here)."""
    require("pettingzoo", "multiagent", f"the PettingZoo env {name!r}")
    own = user_module("pettingzoo", name) is None
    candidate = name if not own or name.startswith("pettingzoo.") else f"pettingzoo.{name}"
    try:
        return importlib.import_module(candidate)
    except ModuleNotFoundError as e:
        if e.name is None or not candidate.startswith(e.name):
            raise
    raise ValueError(f"no PettingZoo env {name!r}: give its module, as 'classic.rps_v2' or "
                     "'pettingzoo.butterfly.pistonball_v6'")


def make(env_config: dict) -> MultiAgentEnv:
    """An env factory for ``.environment("rlmesh.env.pettingzoo:make", env_config=...)``:
    ``env_config["name"]`` a registered PettingZoo id ('classic/rps-v2', pettingzoo's
    ``make``) or an env module ('classic.rps_v2', or one of your own), ``"api"``
    'parallel' (default) or 'aec', every other key an argument of the env's constructor."""
    config = dict(env_config)
    name, api = config.pop("name", None), config.pop("api", "parallel")
    if not name:
        raise ValueError("env_config needs 'name', the PettingZoo env module ('classic.rps_v2')")
    if api not in ("parallel", "aec"):
        raise ValueError(f"env_config 'api': 'parallel' or 'aec', got {api!r}")
    wrapper = ParallelPettingZooEnv if api == "parallel" else PettingZooEnv
    if "/" in name and "-v" in name:  # a registered id, 'classic/rps-v2'
        pettingzoo = require("pettingzoo", "multiagent", f"the PettingZoo env {name!r}")
        if not hasattr(pettingzoo, "make"):
            raise ValueError(f"this pettingzoo ({pettingzoo.__version__}) has no registry: "
                             "name the env's module ('classic.rps_v2')")
        registry = pettingzoo.parallel_registry if api == "parallel" else pettingzoo.aec_registry
        if name not in registry:
            close = difflib.get_close_matches(name, list(registry), 3)
            raise ValueError(f"no PettingZoo env {name!r} in its {api} registry"
                             + (f"; did you mean {' or '.join(map(repr, close))}?" if close
                                else f" ({len(registry)} ids: pettingzoo.pprint_registry())"))
        return wrapper(pettingzoo.make(api, name, **config))
    module = _module(name)
    return wrapper(module.parallel_env(**config) if api == "parallel" else module.env(**config))


class _Spaces(MultiAgentEnv):
    def _take_spaces(self, env: Any) -> None:
        self.env = env
        self.possible_agents = list(env.possible_agents)
        self.observation_spaces = {a: env.observation_space(a) for a in self.possible_agents}
        self.action_spaces = {a: env.action_space(a) for a in self.possible_agents}

    def close(self) -> None:
        self.env.close()


class ParallelPettingZooEnv(_Spaces):
    """A PettingZoo ``ParallelEnv``: all live agents act each step; the episode ends when no
    agent is left (terminated when any agent terminated, else truncated)."""

    def __init__(self, env: Any) -> None:
        require("pettingzoo", "multiagent", "ParallelPettingZooEnv")
        self._take_spaces(env)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, infos = self.env.reset(seed=seed, options=options)
        return dict(obs), {a: infos.get(a, {}) for a in obs}

    def step(self, actions: dict[Any, Any]):
        obs, rewards, terms, truncs, infos = self.env.step(actions)
        terms, truncs = dict(terms), dict(truncs)
        over = not self.env.agents
        terms[ALL] = over and any(terms.values())
        truncs[ALL] = over and not terms[ALL]
        return dict(obs), dict(rewards), terms, truncs, dict(infos)


class PettingZooEnv(_Spaces):
    """A PettingZoo ``AECEnv``: each step the selected agent acts (``actions`` holds its
    action only); rewards of every agent since the last step are returned, summed, and
    agents that are done are stepped with None as the AEC API requires."""

    def __init__(self, env: Any) -> None:
        require("pettingzoo", "multiagent", "PettingZooEnv")
        self._take_spaces(env)
        self._gone: set[Any] = set()

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self.env.reset(seed=seed, options=options)
        self._gone = set()
        agent = self.env.agent_selection
        return {agent: self.env.observe(agent)}, {agent: dict(self.env.infos.get(agent, {}))}

    def step(self, actions: dict[Any, Any]):
        env = self.env
        agent = env.agent_selection
        if agent not in actions:
            raise ValueError(f"PettingZooEnv.step: it is {agent!r}'s turn, got actions for "
                             f"{sorted(map(str, actions))}")
        rewards: dict[Any, float] = {}
        env.step(actions[agent])
        self._add(rewards)
        obs, terms, truncs, infos = {}, {}, {}, {}
        # Agents done are stepped with None (the AEC contract) until a live one is selected.
        while env.agents and (env.terminations[env.agent_selection]
                              or env.truncations[env.agent_selection]):
            done = env.agent_selection
            self._leave(done, obs, terms, truncs)
            env.step(None)
            self._add(rewards)
        for a in list(env.agents):  # done but not selected yet: report them now
            if (env.terminations.get(a) or env.truncations.get(a)) and a not in self._gone:
                self._leave(a, obs, terms, truncs)
        if env.agents:
            nxt = env.agent_selection
            obs[nxt] = env.observe(nxt)
            infos[nxt] = dict(env.infos.get(nxt, {}))
        over = not env.agents
        terms[ALL] = over and any(terms.values())
        truncs[ALL] = over and not terms[ALL]
        return obs, rewards, terms, truncs, infos

    def _add(self, rewards: dict[Any, float]) -> None:
        for a, r in self.env.rewards.items():
            rewards[a] = rewards.get(a, 0.0) + float(r)

    def _leave(self, agent: Any, obs: dict, terms: dict, truncs: dict) -> None:
        if agent in self._gone:
            return
        self._gone.add(agent)
        obs[agent] = self.env.observe(agent)
        terms[agent] = bool(self.env.terminations[agent])
        truncs[agent] = bool(self.env.truncations[agent]) and not terms[agent]

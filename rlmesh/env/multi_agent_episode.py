"""``MultiAgentEpisode``: one episode of a multi-agent env as RLlib's new API stack hands it
to callbacks and connectors (``rlmesh.env.multi_agent_episode``): one ``SingleAgentEpisode``
per agent in ``agent_episodes``, and getters that return dicts by agent id.

Indices of the ``get_*`` count each agent's own steps (RLlib's ``env_steps=False``), except
``-1``, which gives the agents that have an entry from the env's last step (an agent that
did not act then is left out, as RLlib does). ``agent_ids`` limits the agents asked.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from rlmesh.env.single_agent_episode import SingleAgentEpisode, _new_id

ALL_AGENTS = "__all__"


class MultiAgentEpisode:
    """See the module docstring. ``env_t``: env steps taken; ``len(episode)`` the same;
    ``agent_to_module_mapping``: agent id -> module (policy) id, ``module_for(agent_id)``."""

    def __init__(self, id_: str | None = None, *, agent_module_ids: dict | None = None,
                 agent_to_module_mapping_fn: Callable[..., Any] | None = None,
                 observation_space: Any = None, action_space: Any = None,
                 env_t_started: int = 0, **kwargs: Any) -> None:
        self._multi_init(id_, agent_module_ids, agent_to_module_mapping_fn, env_t_started)
        self.observation_space, self.action_space = observation_space, action_space
        self.custom_data: dict[str, Any] = {}

    def _multi_init(self, id_: str | None, agent_module_ids: dict | None,
                    mapping_fn: Callable[..., Any] | None, env_t_started: int = 0) -> None:
        self._ma_id = id_
        self.agent_episodes: dict[Any, SingleAgentEpisode] = {}
        self._module_ids: dict[Any, Any] = dict(agent_module_ids or {})
        self._mapping_fn = mapping_fn
        self._agent_t: dict[Any, int] = {}  # the env step of each agent's last observation
        self.env_t_started = env_t_started
        self._env_steps = 0
        self.is_terminated = self.is_truncated = False

    # --- identity and counters ----------------------------------------------------------
    @property
    def id_(self) -> str:
        if self._ma_id is None:
            self._ma_id = _new_id()
        return self._ma_id

    @property
    def env_t(self) -> int:
        return self.env_t_started + self._env_steps

    def __len__(self) -> int:
        return self._env_steps

    @property
    def agent_ids(self) -> set:
        return set(self.agent_episodes)

    @property
    def agent_to_module_mapping(self) -> dict:
        return {aid: self.module_for(aid) for aid in self.agent_episodes}

    def module_for(self, agent_id: Any) -> Any:
        if agent_id not in self._module_ids and self._mapping_fn is not None:
            self._module_ids[agent_id] = self._mapping_fn(agent_id, self)
        return self._module_ids.get(agent_id)

    @property
    def is_done(self) -> bool:
        return self.is_terminated or self.is_truncated

    def get_return(self, include_hanging_rewards: bool = False) -> float:
        return float(sum(e.get_return() for e in self.agent_episodes.values()))

    def get_agents_to_act(self) -> set:
        """The agents whose last observation came with the env's last step."""
        return {aid for aid, t in self._agent_t.items()
                if t == self._env_steps and not self.agent_episodes[aid].is_done}

    # --- building -----------------------------------------------------------------------
    def _agent(self, agent_id: Any) -> SingleAgentEpisode:
        episode = self.agent_episodes.get(agent_id)
        if episode is None:
            episode = self.agent_episodes[agent_id] = SingleAgentEpisode(
                agent_id=agent_id, module_id=self.module_for(agent_id),
                multi_agent_episode_id=self._ma_id, t_started=self._env_steps)
        return episode

    def add_env_reset(self, *, observations: dict, infos: dict | None = None) -> None:
        infos = infos or {}
        for aid, obs in observations.items():
            self._agent(aid).add_env_reset(obs, infos.get(aid, {}))
            self._agent_t[aid] = 0

    def add_env_step(self, observations: dict, actions: dict, rewards: dict,
                     infos: dict | None = None, *, terminateds: dict | None = None,
                     truncateds: dict | None = None,
                     extra_model_outputs: dict | None = None) -> None:
        """One env step: each agent that acted gets its step (the observation it sees
        next, or its last one again if the env gave none with its final reward); an
        agent seen for the first time starts its episode with its observation."""
        infos, terms, truncs = infos or {}, terminateds or {}, truncateds or {}
        extras = extra_model_outputs or {}
        self._env_steps += 1
        all_term, all_trunc = bool(terms.get(ALL_AGENTS)), bool(truncs.get(ALL_AGENTS))
        for aid, action in actions.items():
            episode = self._agent(aid)
            if not episode.observations:
                continue  # an action for an agent never observed: nothing to attach it to
            obs = observations.get(aid, episode.observations[-1])
            episode.add_env_step(obs, action, float(rewards.get(aid, 0.0)), infos.get(aid, {}),
                                 terminated=bool(terms.get(aid)) or all_term,
                                 truncated=bool(truncs.get(aid)) or all_trunc,
                                 extra_model_outputs=extras.get(aid))
            self._agent_t[aid] = self._env_steps
        for aid, obs in observations.items():
            if aid not in actions:  # joining (or observing without acting)
                episode = self._agent(aid)
                if not episode.observations:
                    episode.add_env_reset(obs, infos.get(aid, {}))
                else:
                    episode.observations[-1] = obs
                self._agent_t[aid] = self._env_steps
        self.is_terminated = self.is_terminated or all_term
        self.is_truncated = self.is_truncated or all_trunc

    # --- getters ------------------------------------------------------------------------
    def _by_agent(self, what: str, indices: Any, agent_ids: Any, **kwargs: Any) -> dict:
        wanted: Iterable = (self.agent_episodes if agent_ids is None else
                            [agent_ids] if not isinstance(agent_ids, (list, tuple, set))
                            else agent_ids)
        out = {}
        for aid in wanted:
            episode = self.agent_episodes.get(aid)
            if episode is None:
                continue
            if isinstance(indices, int) and indices == -1 and (
                    self._agent_t.get(aid) != self._env_steps):
                continue  # no entry from the env's last step
            try:
                out[aid] = getattr(episode, f"get_{what}")(indices, **kwargs)
            except IndexError:
                continue
        return out

    def get_observations(self, indices: Any = None, agent_ids: Any = None, *,
                         env_steps: bool = True, **kwargs: Any) -> dict:
        return self._by_agent("observations", indices, agent_ids, **kwargs)

    def get_infos(self, indices: Any = None, agent_ids: Any = None, *, env_steps: bool = True,
                  **kwargs: Any) -> dict:
        return self._by_agent("infos", indices, agent_ids, **kwargs)

    def get_actions(self, indices: Any = None, agent_ids: Any = None, *,
                    env_steps: bool = True, **kwargs: Any) -> dict:
        return self._by_agent("actions", indices, agent_ids, **kwargs)

    def get_rewards(self, indices: Any = None, agent_ids: Any = None, *,
                    env_steps: bool = True, **kwargs: Any) -> dict:
        return self._by_agent("rewards", indices, agent_ids, **kwargs)

    def get_extra_model_outputs(self, key: str, indices: Any = None, agent_ids: Any = None,
                                **kwargs: Any) -> dict:
        wanted = self.agent_episodes if agent_ids is None else agent_ids
        return {aid: self.agent_episodes[aid].get_extra_model_outputs(key, indices)
                for aid in wanted if aid in self.agent_episodes
                and key in self.agent_episodes[aid].extra_model_outputs}

    def __repr__(self) -> str:
        return (f"MultiAgentEpisode(id_={self.id_!r}, agents={sorted(map(str, self.agent_episodes))},"
                f" env_t={self.env_t}, done={self.is_done})")

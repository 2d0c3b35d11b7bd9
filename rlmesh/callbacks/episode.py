"""The episode the callbacks receive (``Episode``: RLlib's SingleAgentEpisode with the old
stack's names) and the aggregation of its custom metrics and histograms per iteration."""

from __future__ import annotations

import logging
import math
from typing import Any

from rlmesh.env.single_agent_episode import SingleAgentEpisode, _new_id

log = logging.getLogger("rlmesh.callbacks")


#: The agent id RLlib gives the one agent of a single-agent env.
SINGLE_AGENT_ID = "agent0"


class Episode(SingleAgentEpisode):
    """One episode of one env, as the callbacks see it while it runs: RLlib's new stack's
    ``SingleAgentEpisode`` (``get_observations(-1)``, ``custom_data``, ``len(episode)``,
    ``get_return()``...) and its older ``Episode``'s names.

    ``user_data`` is free for the callbacks' own state between steps; ``custom_metrics``
    (name -> number) is reported with the episode when it ends and averaged per training
    iteration (``<name>_mean``, ``_min``, ``_max``); ``hist_data`` (name -> list of numbers)
    goes into the result's ``hist_stats`` as RLlib's does, the lists of the episodes in the
    smoothing window joined. ``last_observation_for()`` and the other ``last_*_for`` are
    RLlib's accessors (the observation as the env returned it, before any filter; with
    env-to-module connectors configured, what they rewrote it to: they are handed this
    episode, as RLlib's are).

    The step history the ``get_*`` read is kept only with ``history=True``, which the
    samplers set where someone can read it (callbacks or connectors configured); without
    it an episode costs a counter update per step.
    """

    __slots__ = ("env_index", "episode_id", "length", "total_reward", "_last_obs",
                 "last_reward", "last_info", "last_action", "user_data", "custom_metrics",
                 "hist_data", "history", "_uid")
    #: Whether observations and infos are dicts by agent id (MultiAgentEpisode).
    per_agent = False

    def __init__(self, env_index: int, episode_id: int, observation: Any = None,
                 info: dict | None = None, *, history: bool = False) -> None:
        # Not SingleAgentEpisode.__init__: one of these per episode of every env, kept lean.
        self.env_index = env_index
        self.episode_id = episode_id
        self.length = 0  # steps taken so far
        self.total_reward = 0.0  # undiscounted, unclipped
        self._last_obs = observation
        self.last_reward: float | None = None
        self.last_info: dict = info or {}
        self.last_action: Any = None
        self.user_data: dict[str, Any] = {}
        self.custom_metrics: dict[str, float] = {}
        self.hist_data: dict[str, list[float]] = {}
        self.history = history
        self._uid = None
        self.agent_id = self.module_id = self.multi_agent_episode_id = None
        self.observation_space = self.action_space = None
        self.is_terminated = self.is_truncated = self.is_numpy = False
        self.t_started = self._lookback = 0
        self.custom_data = self.user_data  # RLlib's new name for the same dict
        self.extra_model_outputs: dict[str, list] = {}
        if history:
            self.observations = [] if observation is None else [observation]
            self.infos = [] if observation is None else [self.last_info]
            self.actions, self.rewards = [], []
        else:
            self.observations = self.infos = self.actions = self.rewards = None

    @property
    def id_(self) -> str:  # RLlib's unique string id; made when first asked for
        if self._uid is None:
            self._uid = _new_id()
        return self._uid

    @property
    def last_observation(self) -> Any:
        return self._last_obs

    @last_observation.setter
    def last_observation(self, observation: Any) -> None:
        """The current observation replaced (an autoreset vector env's first one)."""
        self._last_obs = observation
        if self.history:
            if self.observations:
                self.observations[-1] = observation
            else:
                self.observations.append(observation)
                self.infos.append(self.last_info)

    def add_env_reset(self, observation: Any, infos: dict | None = None) -> None:
        self._last_obs, self.last_info = observation, infos or {}
        if self.history:
            self.observations.append(observation)
            self.infos.append(self.last_info)

    def record_step(self, observation: Any, reward: float, info: dict,
                    action: Any = None, terminated: bool = False,
                    truncated: bool = False) -> None:
        self.length += 1
        self.total_reward += reward
        self._last_obs, self.last_reward, self.last_info = observation, reward, info
        self.last_action = action
        self.is_terminated, self.is_truncated = terminated, truncated
        if self.history:
            self.observations.append(observation)
            self.actions.append(action)
            self.rewards.append(reward)
            self.infos.append(info)

    def add_env_step(self, observation: Any, action: Any, reward: float,
                     infos: dict | None = None, *, terminated: bool = False,
                     truncated: bool = False, extra_model_outputs: dict | None = None) -> None:
        self.record_step(observation, reward, infos or {}, action, terminated, truncated)

    def __len__(self) -> int:
        return self.length

    def get_return(self, include_hanging_rewards: bool = False) -> float:
        return self.total_reward

    def _no_data(self, what: str) -> Exception:
        # The getters' and setters' error when no history is kept (their data is None).
        if what == "get":
            return RuntimeError(
                "this episode keeps no step history (only last_observation and the other "
                "last_*): the samplers keep it where callbacks or connectors are configured")
        return RuntimeError(f"{what}: this episode keeps no step history")

    def _set(self, data: Any, what: str, new_data: Any, at_indices: Any,
             lookback_neg: bool) -> None:
        super()._set(data, what, new_data, at_indices, lookback_neg)
        if what == "observations" and data:
            self._last_obs = data[-1]

    def set_rewards(self, *, new_data: Any, at_indices: Any = None,
                    neg_index_as_lookback: bool = False) -> None:
        old = sum(self.rewards) if self.rewards is not None else 0.0
        self._set(self.rewards, "rewards", new_data, at_indices, neg_index_as_lookback)
        self.total_reward += float(sum(self.rewards) - old)

    # RLlib's per-agent accessors; a single-agent episode has the one agent "agent0".
    def last_observation_for(self, agent_id: Any = SINGLE_AGENT_ID) -> Any:
        return self._for(self.last_observation, agent_id, "observation")

    def last_info_for(self, agent_id: Any = SINGLE_AGENT_ID) -> Any:
        return self._for(self.last_info, agent_id, "info")

    def last_reward_for(self, agent_id: Any = SINGLE_AGENT_ID) -> float | None:
        return self._for(self.last_reward, agent_id, "reward")

    def last_action_for(self, agent_id: Any = SINGLE_AGENT_ID) -> Any:
        return self._for(self.last_action, agent_id, "action")

    def _for(self, value: Any, agent_id: Any, what: str) -> Any:
        if self.per_agent:
            if not isinstance(value, dict):
                raise KeyError(f"a multi-agent episode keeps no last {what} per agent "
                               f"(only observations and infos); sum rewards in "
                               "episode.user_data from on_episode_step instead")
            return value.get(agent_id)
        if agent_id not in (SINGLE_AGENT_ID, None):
            raise KeyError(f"agent {agent_id!r}: a single-agent episode has one agent, "
                           f"{SINGLE_AGENT_ID!r} (call last_{what}_for() without an id)")
        return value

    def summary(self) -> dict[str, Any]:
        """What the fragment carries for a finished episode (plain data)."""
        out = {"return": float(self.total_reward), "length": int(self.length),
               "custom_metrics": _numbers(self.custom_metrics)}
        if self.hist_data:
            out["hist_data"] = _number_lists(self.hist_data)
        return out


def _numbers(metrics: dict[str, Any]) -> dict[str, float]:
    out = {}
    for name, value in metrics.items():
        try:
            out[str(name)] = float(value)
        except (TypeError, ValueError):
            log.warning("custom metric %r is %r, not a number: dropped", name, value)
    return out


def _number_lists(hist: dict[str, Any]) -> dict[str, list[float]]:
    out = {}
    for name, values in hist.items():
        try:
            out[str(name)] = [float(v) for v in values]
        except (TypeError, ValueError):
            log.warning("hist_data %r is %r, not a list of numbers: dropped", name, values)
    return out


def summarize_custom_metrics(metrics: list[dict[str, float]]) -> dict[str, float]:
    """``{"<name>_mean", "<name>_min", "<name>_max"}`` over the episodes' custom metrics;
    a name absent from some episodes is summarised over those that have it, and NaNs are
    left out (a name that is only NaN gives NaN)."""
    values: dict[str, list[float]] = {}
    for m in metrics:
        for name, value in m.items():
            values.setdefault(name, []).append(float(value))
    out: dict[str, float] = {}
    for name, vs in values.items():
        finite = [v for v in vs if not math.isnan(v)] or [math.nan]
        out[f"{name}_mean"] = sum(finite) / len(finite)
        out[f"{name}_min"] = min(finite)
        out[f"{name}_max"] = max(finite)
    return out


def summarize_hist_data(episodes: Any) -> dict[str, list[float]]:
    """RLlib's ``hist_stats``: ``episode_reward`` and ``episode_lengths`` of ``episodes``
    (the smoothing window) and each name of their ``hist_data``, the lists joined."""
    out: dict[str, list[float]] = {"episode_reward": [], "episode_lengths": []}
    for e in episodes:
        out["episode_reward"].append(float(e["return"]))
        out["episode_lengths"].append(int(e["length"]))
        for name, values in (e.get("hist_data") or {}).items():
            out.setdefault(name, []).extend(values)
    return out

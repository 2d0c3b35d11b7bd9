"""The episodes of a vector sampler's envs (``VectorEnvSampler``): ended ones kept as arrays
and listed in the fragment, or, where callbacks are set, one ``Episode`` per env from its
start to its end, the one-env path's hooks called on it (``on_episode_step`` only where the
callbacks define it: a Python call per env and step)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlmesh.callbacks import Callbacks, Episode, hook_arguments


class VectorEpisodes:
    """Episode bookkeeping for ``VectorEnvSampler`` (its ``_returns``, ``_lengths``, ``_ids``,
    ``_episode_ids``, ``_episodes``, ``_obs``, ``callbacks``, ``counters``, ``_cut``)."""

    callbacks: Callbacks | None
    _episodes_of: list[Episode | None]

    def _list_episodes(self, fragment: dict[str, Any]) -> None:
        """The episodes ended without callbacks as the fragment's summaries: the last
        ``episodes_listed`` of them, the rest counted."""
        returns = np.concatenate(self._ended_returns)
        lengths = np.concatenate(self._ended_lengths)
        self._ended_returns, self._ended_lengths = [], []
        keep = len(returns) if self.episodes_listed is None else self.episodes_listed
        cut = max(0, len(returns) - keep)
        if cut:
            fragment["num_episodes_unlisted"] = cut
        self._episodes.extend({"return": r, "length": n, "custom_metrics": {}} for r, n in
                              zip(returns[cut:].tolist(), lengths[cut:].tolist()))

    def _end_episodes(self, envs: np.ndarray, t: int, live: np.ndarray) -> None:
        """Episodes of ``envs`` ended on row ``t``: reported (those begun before a
        complete_episodes cut), and new ones begun. Callbacks see each one; without them
        this is a few array operations for the whole batch."""
        self._reset_inputs(envs)
        if self.callbacks is not None:
            for b in envs.tolist():
                if live[b]:
                    self._end_episode(b)
                    if self._cut is not None and t >= self._cut:
                        live[b] = False
                else:
                    self._start_episode(b)
            return
        reported = envs[live[envs]]
        self._ended_returns.append(self._returns[reported])
        self._ended_lengths.append(self._lengths[reported])
        self.counters["num_episodes"] += len(reported)
        if self._cut is not None and t >= self._cut:
            live[reported] = False  # complete_episodes: done; its later rows are padding
        self._returns[envs] = 0
        self._lengths[envs] = 0
        if self._with_ids:  # the policy reads episode ids: new ones
            self._ids[envs] = [next(self._episode_ids) for _ in range(len(envs))]

    def _step_callbacks(self, off: int, n: int, actions: np.ndarray, obs: np.ndarray,
                        reward: np.ndarray, done: np.ndarray, final: Any, resetting: Any,
                        infos: Any) -> None:
        """Each env's step recorded on its Episode and ``on_episode_step`` called: the
        one-env path's per-step hook, a Python call per env (asked for by defining it)."""
        for k in range(n):
            b = off + k
            episode = self._episodes_of[b]
            if episode is None:
                continue
            if resetting is not None and resetting[k]:  # next-step: the reset's observation
                episode.last_observation = obs[k]
                continue
            seen = final[k] if done[k] and final is not None else obs[k]
            episode.record_step(seen, float(reward[k]), _info_of(infos, k), actions[k])
            self.callbacks.on_episode_step(episode=episode, **self._hook_args[b])

    def _new_episode(self, b: int, observation: Any = None) -> None:
        episode = self._episodes_of[b] = Episode(b, int(self._ids[b]), observation,
                                                 history=self.keep_history and self._per_step)
        hook_args = self._hook_args[b] = hook_arguments(self, b, self._env_of(b))
        self.callbacks.on_episode_created(episode=episode, **hook_args)
        self.callbacks.on_episode_start(episode=episode, **hook_args)

    def _end_episode(self, b: int) -> None:
        summary = {"return": float(self._returns[b]), "length": int(self._lengths[b]),
                   "custom_metrics": {}}
        if self.callbacks is not None:
            episode = self._episodes_of[b] or Episode(b, int(self._ids[b]))
            # The sampler's count (reset rows left out) is the episode's, steps recorded or not.
            episode.total_reward, episode.length = summary["return"], summary["length"]
            self.callbacks.on_episode_end(
                episode=episode, **(self._hook_args[b] or hook_arguments(self, b, self._env_of(b))))
            summary = episode.summary()
        self._episodes.append(summary)
        self.counters["num_episodes"] += 1
        self._start_episode(b)

    def _start_episode(self, b: int) -> None:
        self._returns[b] = 0
        self._lengths[b] = 0
        self._ids[b] = next(self._episode_ids)
        if self.callbacks is not None:
            # Its first observation comes with the next step (same-step: this one's).
            self._new_episode(b, self._obs_of(b))

    def _env_of(self, b: int) -> Any:
        """The vector env that steps env ``b`` (its sub-envs may not be gym.Env objects)."""
        for group, off, n in zip(self.groups, self.offsets, self.sizes):
            if off <= b < off + n:
                return group
        return None

    def _obs_of(self, b: int) -> Any:
        for g, (off, n) in enumerate(zip(self.offsets, self.sizes)):
            if off <= b < off + n and len(self._obs[g]) == n:
                return self._obs[g][b - off]
        return None


def _info_of(infos: Any, k: int) -> dict:
    """Env ``k``'s info from a vector env's dict of arrays (gymnasium's ``_key`` masks)."""
    if not infos:
        return {}
    out = {}
    for key, values in infos.items():
        if key.startswith("_") or key in ("final_obs", "final_info"):
            continue
        mask = infos.get(f"_{key}")
        if mask is None or mask[k]:
            try:
                out[key] = values[k]
            except (TypeError, IndexError, KeyError):
                out[key] = values
    return out

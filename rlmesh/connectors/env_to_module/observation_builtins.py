"""RLlib's env-to-module built-ins that change observations. Each rewrites the last
observation of every episode it is given (``set_observations(at_indices=-1)``), except
``FrameStackingEnvToModule``, which reads past observations and so puts its stack in the
batch (``batch["obs"]``) and leaves the episode's frames as they came."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from rlmesh.connectors.connector_v2 import ConnectorV2
from rlmesh.connectors.episode import one_hot
from rlmesh.preprocessing import stacked_space
from rlmesh.rl.filters import RunningStat


def _flat_space(space: gym.Space) -> gym.spaces.Box:
    if isinstance(space, gym.spaces.Box):
        return gym.spaces.Box(space.low.reshape(-1).astype(np.float32),
                              space.high.reshape(-1).astype(np.float32), dtype=np.float32)
    if isinstance(space, gym.spaces.Discrete):
        return gym.spaces.Box(0.0, 1.0, (int(space.n),), np.float32)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return gym.spaces.Box(0.0, 1.0, (int(space.nvec.sum()),), np.float32)
    if isinstance(space, gym.spaces.MultiBinary):
        return gym.spaces.Box(0.0, 1.0, (int(np.prod(space.shape)),), np.float32)
    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        parts = [_flat_space(s) for s in (space.spaces.values() if isinstance(space, gym.spaces.Dict)
                                          else space.spaces)]
        return gym.spaces.Box(np.concatenate([p.low for p in parts]),
                              np.concatenate([p.high for p in parts]), dtype=np.float32)
    raise ValueError(f"FlattenObservations: cannot flatten a {type(space).__name__} "
                     "observation space (Box, Discrete, MultiDiscrete, MultiBinary, Dict, Tuple)")


def _flatten(space: gym.Space, value: Any) -> np.ndarray:
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        return one_hot(value, space)
    if isinstance(space, gym.spaces.Dict):
        return np.concatenate([_flatten(s, value[k]) for k, s in space.spaces.items()])
    if isinstance(space, gym.spaces.Tuple):
        return np.concatenate([_flatten(s, v) for s, v in zip(space.spaces, value)])
    return np.asarray(value, np.float32).reshape(-1)


class FlattenObservations(ConnectorV2):
    """Any observation (Box, Discrete one-hot, Dict and Tuple of them, in the space's key
    order) as one flat float32 vector."""

    def __init__(self, input_observation_space: gym.Space | None = None,
                 input_action_space: gym.Space | None = None, *, multi_agent: bool = False,
                 agent_ids: Any = None, as_learner_connector: bool = False, **kwargs: Any) -> None:
        if multi_agent:
            raise ValueError("FlattenObservations: multi_agent=True is not supported here "
                             "(rlmesh's connectors run on single-agent runners)")
        self.as_learner_connector = as_learner_connector
        super().__init__(input_observation_space, input_action_space, **kwargs)

    def recompute_output_observation_space(self, input_observation_space, input_action_space):
        return _flat_space(input_observation_space)

    def __call__(self, *, rl_module, batch, episodes, explore=None, shared_data=None,
                 metrics=None, **kwargs):
        if self.as_learner_connector:  # the stored observations are flat already
            return batch
        space = self.input_observation_space
        for episode in self.single_agent_episode_iterator(episodes):
            episode.set_observations(new_data=_flatten(space, episode.get_observations(-1)),
                                     at_indices=-1)
        return batch


class PrevActionsPrevRewards(ConnectorV2):
    """The observation becomes ``{"_obs": obs, "prev_n_actions": the last n actions
    (Discrete one-hot, flattened), "prev_n_rewards": the last n rewards}``; zeros before
    the episode's start. Usually followed by FlattenObservations."""

    ORIG_OBS_KEY = "_obs"
    PREV_ACTIONS_KEY = "prev_n_actions"
    PREV_REWARDS_KEY = "prev_n_rewards"

    def __init__(self, input_observation_space: gym.Space | None = None,
                 input_action_space: gym.Space | None = None, *, multi_agent: bool = False,
                 n_prev_actions: int = 1, n_prev_rewards: int = 1,
                 as_learner_connector: bool = False, **kwargs: Any) -> None:
        if multi_agent:
            raise ValueError("PrevActionsPrevRewards: multi_agent=True is not supported here")
        for name, n in (("n_prev_actions", n_prev_actions), ("n_prev_rewards", n_prev_rewards)):
            if not isinstance(n, int) or n < 0:
                raise ValueError(f"PrevActionsPrevRewards: {name} must be an int >= 0, got {n!r}")
        self.n_prev_actions, self.n_prev_rewards = n_prev_actions, n_prev_rewards
        self.as_learner_connector = as_learner_connector
        super().__init__(input_observation_space, input_action_space, **kwargs)

    def recompute_output_observation_space(self, input_observation_space, input_action_space):
        if input_action_space is None:
            raise ValueError("PrevActionsPrevRewards needs the action space")
        act = _flat_space(input_action_space)
        self._action_width = act.shape[0]
        n = self.n_prev_actions
        return gym.spaces.Dict({
            self.ORIG_OBS_KEY: input_observation_space,
            self.PREV_ACTIONS_KEY: gym.spaces.Box(np.tile(act.low, n), np.tile(act.high, n),
                                                  dtype=np.float32),
            self.PREV_REWARDS_KEY: gym.spaces.Box(-np.inf, np.inf, (self.n_prev_rewards,),
                                                  np.float32)})

    def __call__(self, *, rl_module, batch, episodes, explore=None, shared_data=None,
                 metrics=None, **kwargs):
        if self.as_learner_connector:  # the stored observations hold them already
            return batch
        width = self._action_width
        for ep in self.single_agent_episode_iterator(episodes):
            n, m = self.n_prev_actions, self.n_prev_rewards
            actions = ep.get_actions(slice(-n, None), fill=0, one_hot_discrete=True) if n else []
            prev_a = (np.concatenate([np.asarray(a, np.float32).reshape(-1) for a in actions])
                      if n else np.zeros(0, np.float32))
            prev_a = prev_a.reshape(n * width)
            prev_r = np.asarray(ep.get_rewards(slice(-m, None), fill=0.0) if m else [],
                                np.float32)
            ep.set_observations(new_data={self.ORIG_OBS_KEY: ep.get_observations(-1),
                                          self.PREV_ACTIONS_KEY: prev_a,
                                          self.PREV_REWARDS_KEY: prev_r}, at_indices=-1)
        return batch


class MeanStdFilter(ConnectorV2):
    """Each observation normalised by the running mean and std of every observation this
    connector has seen (``de_mean_to_zero``, ``de_std_to_one``), clipped to
    ``[-clip_by_value, clip_by_value]``, as float32 (rlmesh's RunningStat). Box
    observations. Its statistics are its runner's own; ``get_state`` / ``set_state`` /
    ``merge_states`` carry them, and ``flush`` / ``merge_buffer`` are rl/filters.py's
    MeanStdFilter's (what a runner saw since its last flush, for a global copy to merge;
    ``set_state`` keeps that part on top of the global statistics)."""

    def __init__(self, input_observation_space: gym.Space | None = None,
                 input_action_space: gym.Space | None = None, *, multi_agent: bool = False,
                 de_mean_to_zero: bool = True, de_std_to_one: bool = True,
                 clip_by_value: float | None = 10.0, update_stats: bool = True,
                 **kwargs: Any) -> None:
        if multi_agent:
            raise ValueError("MeanStdFilter: multi_agent=True is not supported here")
        self.de_mean, self.de_std, self.clip = de_mean_to_zero, de_std_to_one, clip_by_value
        self.update_stats = update_stats
        self.stats: RunningStat | None = None
        self.buffer: RunningStat | None = None
        super().__init__(input_observation_space, input_action_space, **kwargs)

    def recompute_output_observation_space(self, input_observation_space, input_action_space):
        if not isinstance(input_observation_space, gym.spaces.Box):
            raise ValueError(f"MeanStdFilter normalises Box observations; the input space is "
                             f"{input_observation_space} (put FlattenObservations before it)")
        if self.stats is None or self.stats.mean.shape != input_observation_space.shape:
            self.stats = RunningStat(input_observation_space.shape)
            self.buffer = RunningStat(input_observation_space.shape)
        c = np.inf if self.clip is None else float(self.clip)
        return gym.spaces.Box(-c, c, input_observation_space.shape, np.float32)

    def normalize(self, obs: Any, update: bool = True) -> np.ndarray:
        obs = np.asarray(obs, np.float64)
        if update:
            self.stats.push(obs[None])
            self.buffer.push(obs[None])
        out = obs
        if self.de_mean:
            out = out - self.stats.mean
        if self.de_std:
            out = out / (self.stats.std + 1e-8)
        if self.clip is not None:
            out = np.clip(out, -self.clip, self.clip)
        return out.astype(np.float32)

    def __call__(self, *, rl_module, batch, episodes, explore=None, shared_data=None,
                 metrics=None, **kwargs):
        for ep in self.single_agent_episode_iterator(episodes):
            ep.set_observations(new_data=self.normalize(ep.get_observations(-1),
                                                        self.update_stats), at_indices=-1)
        return batch

    def get_state(self, components: Any = None, *, not_components: Any = None,
                  **kwargs: Any) -> dict[str, Any]:
        return {} if self.stats is None else self.stats.to_data()

    def set_state(self, state: dict[str, Any]) -> None:
        if state:
            self.stats = RunningStat.from_data(state)
            if self.buffer is not None:
                self.stats.merge(self.buffer)

    def flush(self) -> dict[str, Any]:
        """The statistics gathered since the last flush, and a fresh buffer."""
        data = self.buffer.to_data()
        self.buffer = RunningStat(self.buffer.mean.shape)
        return data

    def merge_buffer(self, data: dict[str, Any] | None) -> None:
        """A global copy takes in one runner's flushed statistics."""
        if data:
            self.stats.merge(RunningStat.from_data(data))

    def merge_states(self, states: list[dict[str, Any]]) -> dict[str, Any]:
        """The statistics of every state's observations together (each runner saw its own)."""
        merged: RunningStat | None = None
        for s in states:
            if not s:
                continue
            rs = RunningStat.from_data(s)
            if merged is None:
                merged = rs
            else:
                merged.merge(rs)
        return {} if merged is None else merged.to_data()

    def reset_state(self) -> None:
        if self.stats is not None:
            self.stats = RunningStat(self.stats.mean.shape)
            self.buffer = RunningStat(self.stats.mean.shape)


class FrameStackingEnvToModule(ConnectorV2):
    """The last ``num_frames`` observations stacked along the last axis (a 2-D frame gains
    that axis), the first observation repeated before the episode's start: what the
    module sees goes in ``batch["obs"]`` (rlmesh's ``stacked_space``, as model
    ``framestack``), the episode keeps its single frames."""

    def __init__(self, input_observation_space: gym.Space | None = None,
                 input_action_space: gym.Space | None = None, *, num_frames: int = 1,
                 multi_agent: bool = False, as_learner_connector: bool = False,
                 **kwargs: Any) -> None:
        if multi_agent:
            raise ValueError("FrameStackingEnvToModule: multi_agent=True is not supported here")
        if not isinstance(num_frames, int) or num_frames < 1:
            raise ValueError(f"FrameStackingEnvToModule: num_frames must be an int >= 1, "
                             f"got {num_frames!r}")
        self.num_frames = num_frames
        self.as_learner_connector = as_learner_connector
        super().__init__(input_observation_space, input_action_space, **kwargs)

    def recompute_output_observation_space(self, input_observation_space, input_action_space):
        return stacked_space(input_observation_space, self.num_frames)

    def __call__(self, *, rl_module, batch, episodes, explore=None, shared_data=None,
                 metrics=None, **kwargs):
        if self.as_learner_connector:  # the stored observations are stacked already
            return batch
        k = self.num_frames
        for ep in self.single_agent_episode_iterator(episodes):
            first = ep.get_observations(0)
            frames = [np.asarray(f) for f in ep.get_observations(slice(-k, None), fill=0)]
            have = min(k, len(ep) + 1)
            frames = [np.asarray(first)] * (k - have) + frames[k - have:]
            frames = [f[..., None] if f.ndim == 2 else f for f in frames]
            self.add_batch_item(batch, "obs", np.concatenate(frames, -1), single_agent_episode=ep)
        return batch

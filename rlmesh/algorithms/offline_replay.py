"""Replay-based learning from a dataset alone (CQL, IQL): at build, ``input``'s episodes are
read, checked against the env's spaces and turned into n-step transitions that fill a replay
buffer the size of the data; each iteration then draws its gradient steps from it, as the
off-policy family draws from its replay (``off_policy.py``). No env is stepped for training:
the evaluation runners (``evaluation_interval``) play the policy.

As in RLlib, the rows read count as sampled (``timesteps_total``), so ``lr`` schedules and
stop criteria on env steps follow the data read.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from rlmesh.algorithms.off_policy import OffPolicy
from rlmesh.algorithms.offline_replay_config import OfflineReplayConfig
from rlmesh.config.base import ConfigError
from rlmesh.driver.algorithm import Algorithm
from rlmesh.driver.trainer_args import trainer_config
from rlmesh.env.registry import as_space
from rlmesh.offline.estimators import estimate
from rlmesh.offline.filtering import dataset_filter, filtered
from rlmesh.offline.reader import DatasetError, OfflineDataset, open_input, resolve_files
from rlmesh.offline.records import ACTION_PROB, NEW_OBS
from rlmesh.rl.action_noise import action_bounds
from rlmesh.rl.columns import DEFAULT_POLICY_ID, Columns
from rlmesh.rl.nstep import nstep_transitions
from rlmesh.rl.replay import PrioritizedReplayBuffer, ReplayBuffer, transition_columns


def dataset_transitions(dataset: OfflineDataset, n_step: int, gamma: float
                        ) -> dict[str, np.ndarray]:
    """Every episode of ``dataset`` as n-step transitions (``rl/replay.py``'s columns). An
    episode the data does not finish bootstraps from its last ``new_obs``; data without
    ``new_obs`` takes the next step's ``obs`` (and, at the end, the last one's)."""
    parts = []
    for e in dataset.episodes:
        obs = e[Columns.OBS]
        new_obs = e[NEW_OBS] if NEW_OBS in e else np.concatenate([obs[1:], obs[-1:]])
        steps = {"obs": obs, "actions": e[Columns.ACTIONS], "rewards": e[Columns.REWARDS],
                 "terminateds": e[Columns.TERMINATEDS], "truncateds": e[Columns.TRUNCATEDS],
                 "next_obs": new_obs}
        parts.append(nstep_transitions(steps, n_step, gamma, cut=True)[0])
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def check_action_range(dataset: OfflineDataset, action_space: gym.Space,
                       config: OfflineReplayConfig) -> None:
    """DatasetError (one line) when logged Box actions lie outside where the actor acts
    (``action_bounds``: [-1, 1] with normalize_actions): the data was written in other units."""
    if not isinstance(action_space, gym.spaces.Box):
        return
    low, high = action_bounds(action_space, config)
    actions = np.concatenate([e[Columns.ACTIONS] for e in dataset.episodes])
    actions = actions.reshape(len(actions), -1)
    lo, hi = actions.min(0), actions.max(0)
    slack = 1e-4 * (high - low)
    if np.all(lo >= low - slack) and np.all(hi <= high + slack):
        return
    where = ("[-1, 1] (normalize_actions=True: set normalize_actions=False to learn in the "
             "env's units)" if config.normalize_actions else f"the env's bounds {action_space}")
    raise DatasetError(f"input {dataset.source!r} does not fit env {config.env!r}: its actions "
                       f"range over [{lo.min():.3g}, {hi.max():.3g}], the actor acts in {where}")


class OfflineReplay(Algorithm):
    """Base of CQL and IQL: a replay filled from ``input`` once; ``training_step`` is
    replay sample -> update -> priorities -> publish, with ``OffPolicy``'s helpers."""

    config_class = OfflineReplayConfig
    config: OfflineReplayConfig
    supports_multi_agent = False  # one dataset, one policy

    def __init__(self, config: OfflineReplayConfig | dict[str, Any] | None = None, env: Any = None,
                 logger_creator: Any = None) -> None:
        config = trainer_config(self.config_class, config, env, logger_creator)  # RLlib's forms
        config.validate()
        resolve_files(config.input_)  # a path with no data: one line before any env is made
        super().__init__(config)

    # Drawing K minibatches as one [K, B] batch, and TD errors back as priorities.
    replay_sample = OffPolicy.replay_sample
    update_priorities = OffPolicy.update_priorities

    def check_spaces(self, obs_space: gym.Space, action_space: gym.Space) -> None:
        """Raise a one-line error for spaces this algorithm cannot learn on."""

    def _policy_specs(self) -> dict[str, dict[str, Any]]:
        # Runs before any process starts: data that does not fit the env fails here.
        specs = super()._policy_specs()
        spec = specs[DEFAULT_POLICY_ID]
        obs_space, action_space = (as_space(spec["observation_space"]),
                                   as_space(spec["action_space"]))
        self.check_spaces(obs_space, action_space)
        cfg = self.config
        self.sources = open_input(cfg, {None: (obs_space, action_space)})
        self.dataset = self.sources[0][1]
        check_action_range(self.dataset, action_space, cfg)
        if cfg.off_policy_estimation_methods:
            self._check_estimable()
        transitions = dataset_transitions(self.dataset, cfg.n_step, cfg.gamma)
        self.dataset_filter = dataset_filter([self.dataset], cfg.observation_filter, obs_space)
        for column in ("obs", "next_obs"):  # as the evaluation runners will see them
            transitions[column] = self.dataset_filter(transitions[column], update=False)
        self.replay = self._replay_of(len(transitions["rewards"]), obs_space, action_space)
        self.replay.add(transitions)
        self.replays = {DEFAULT_POLICY_ID: self.replay}
        return specs

    def _initial_obs_filter(self) -> Any:
        """The filter fitted on the dataset (``dataset_filter``): the evaluation runners,
        ``compute_single_action``, checkpoints and exports normalise as training did."""
        return self.dataset_filter

    def _replay_of(self, size: int, obs_space: gym.Space, action_space: gym.Space
                   ) -> ReplayBuffer:
        rb, specs = self.config.replay_settings(), transition_columns(obs_space, action_space)
        if self.config.prioritized_replay:
            return PrioritizedReplayBuffer(size, specs, rb["prioritized_replay_alpha"],
                                           rb["prioritized_replay_eps"], seed=self.config.seed)
        return ReplayBuffer(size, specs, seed=self.config.seed)

    def _check_estimable(self) -> None:
        logged = all(Columns.ACTION_LOGP in e or ACTION_PROB in e for e in self.dataset.episodes)
        if not logged:
            raise ConfigError(f"off_policy_estimation_methods: input {self.dataset.source!r} "
                              "has no action_logp (or action_prob) column, which importance "
                              "sampling needs; remove the estimators or log the behaviour "
                              "policy's probabilities")

    def training_step(self) -> dict[str, dict[str, float]]:
        """``gradient_steps_per_iteration`` minibatches of ``train_batch_size`` from the
        dataset, one learner call; their rows count as sampled (RLlib's offline counts)."""
        cfg = self.config
        k_steps = cfg.gradient_steps_per_iteration()
        self.env_runners.record([{"env_steps": k_steps * cfg.train_batch_size, "episodes": []}])
        samples, batches = self.replay_sample(k_steps)
        with self.timer("learn_time_s"):
            stats = self.learner_group.update_from_batch(batches,
                                                         timesteps=self.timesteps_sampled)
        self.update_priorities(samples, stats)
        self.env_runners.sync_weights()  # the param server: driver copies, remote learners
        return stats

    def iteration_result(self, start: float, learner_stats: dict[str, dict[str, Any]]
                         ) -> dict[str, Any]:
        """The result with the dataset's counts (``offline``) and, where asked for, the
        off-policy estimates on its episodes, as MARWIL's."""
        result = super().iteration_result(start, learner_stats)
        stats = self.dataset.stats()
        result["offline"] = {k: stats[k] for k in ("num_records_skipped", "skipped",
                                                    "num_episodes", "num_steps")}
        result["offline"]["num_transitions"] = len(self.replay)
        methods = self.config.off_policy_estimation_methods
        if methods:
            episodes = [filtered(e, self.obs_filter) for e in
                        self.dataset.draw(self.config.off_policy_estimation_episodes)]
            result["off_policy_estimation"] = estimate(methods, self.get_policy(), episodes,
                                                       self.config.gamma)
        return result

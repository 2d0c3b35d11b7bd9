"""MARWIL (Wang et al. 2018): imitation weighted by exp(beta x advantage), advantages from a
value function trained alongside on whole-episode returns; BC is beta = 0.

Offline: each iteration reads ``train_batch_size`` steps of whole episodes from ``input``
(a dataset, or a mix with the sampler), computes returns and advantages on the learner, and
takes the configured SGD passes. No env is stepped for training; the evaluation runners
(``evaluation_interval``) play the policy to report how it does, as for every algorithm.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlmesh.config.base import ConfigError
from rlmesh.driver.algorithm import Algorithm
from rlmesh.driver.trainer_args import trainer_config
from rlmesh.driver.env_runner_group import synchronous_parallel_sample
from rlmesh.algorithms.marwil_config import MARWILConfig
from rlmesh.offline.estimators import estimate
from rlmesh.offline.filtering import dataset_filter, filtered
from rlmesh.offline.reader import common_columns, open_input
from rlmesh.policy.recurrent import (is_recurrent, sequence_index, sequence_samples,
                                     time_major_outputs)
from rlmesh.policy.learner_stats import entropy_of, explained_variance
from rlmesh.policy.torch_policy import TorchPolicy
from rlmesh.rl.columns import DEFAULT_POLICY_ID, Columns, merge_by_policy, per_policy
from rlmesh.rl.gae import compute_gae

__all__ = ["MARWIL", "MARWILConfig", "MARWILTorchPolicy"]

MAX_EXPONENT = 20.0  # exp(beta * A / c) capped at e^20: one outlier return cannot overflow


class MARWILTorchPolicy(TorchPolicy):
    """MARWIL's learner side: returns (bootstrapped where an episode is cut) and the
    critic's values over the time-major batch, the advantage-weighted imitation loss."""

    def prepare_batch(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        cfg, model = self.config, self.model
        if is_recurrent(model):
            self._initial_states(batch)
            index = sequence_index(batch, model.max_seq_len)
            with torch.no_grad():
                _, values, bootstrap = time_major_outputs(model, batch, index)
            return sequence_samples(batch, index, returns=self._returns(batch, values, bootstrap))
        steps, width = batch[Columns.REWARDS].shape
        values = torch.zeros((steps, width), device=batch[Columns.REWARDS].device)
        bootstrap = torch.zeros_like(values)
        if cfg.beta > 0:  # BC reads no value: none computed
            with torch.no_grad():
                values = model(batch[Columns.OBS].flatten(0, 1))[1].reshape(steps, width)
                bootstrap[steps - 1] = model(batch["next_obs"])[1]
                index = batch["trunc_index"].long().reshape(-1, 2)
                if len(index):
                    bootstrap[index[:, 0], index[:, 1]] = model(batch["trunc_obs"])[1]
        returns = self._returns(batch, values, bootstrap)
        valid = batch[Columns.MASK].flatten()
        return {"obs": batch[Columns.OBS].flatten(0, 1)[valid],
                "actions": batch[Columns.ACTIONS].flatten(0, 1)[valid],
                "returns": returns.flatten()[valid]}

    def _returns(self, batch: dict[str, torch.Tensor], values: torch.Tensor,
                 bootstrap: torch.Tensor) -> torch.Tensor:
        """Discounted returns of the rest of each episode (lambda 1: Monte Carlo, with the
        critic's value where the data stops before the episode's end)."""
        _, returns = compute_gae(batch[Columns.REWARDS], values, bootstrap,
                                 batch[Columns.TERMINATEDS], batch[Columns.TRUNCATEDS],
                                 self.config.gamma, 1.0)
        return returns

    def _initial_states(self, batch: dict[str, torch.Tensor]) -> None:
        """Data without recorded recurrent state (another policy's, a converted dataset):
        every sequence starts from the initial state."""
        if Columns.state_in(0) in batch:
            return
        steps, width = batch[Columns.REWARDS].shape
        for i, s in enumerate(self.get_initial_state()):
            zeros = torch.as_tensor(np.asarray(s), device=batch[Columns.REWARDS].device)
            batch[Columns.state_in(i)] = batch[Columns.state_out(i)] = zeros.expand(
                steps, width, *zeros.shape).clone()

    def loss(self, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        cfg = self.config
        dist_inputs, values = self.model_outputs(mb)
        mb = self.train_rows(mb)  # sequences: their real steps only, padding left out
        dist = self.dist_class.from_inputs(dist_inputs)
        logp = dist.logp(mb["actions"])
        stats = {"entropy": entropy_of(dist).mean().detach()}
        if cfg.beta == 0:  # behaviour cloning
            policy_loss = -logp.mean()
            return policy_loss, {"policy_loss": policy_loss.detach(),
                                 "total_loss": policy_loss.detach(), **stats}
        adv = mb["returns"] - values
        ma = self.state.setdefault("moving_average_sqd_adv_norm",
                                   cfg.moving_average_sqd_adv_norm_start)
        ma += cfg.moving_average_sqd_adv_norm_update_rate * (float(adv.detach().pow(2).mean()) - ma)
        self.state["moving_average_sqd_adv_norm"] = ma
        exponent = torch.clamp(cfg.beta * adv.detach() / (1e-8 + ma ** 0.5), max=MAX_EXPONENT)
        policy_loss = -(torch.exp(exponent) * logp).mean()
        vf_loss = 0.5 * adv.pow(2).mean()
        total = policy_loss + cfg.vf_coeff * vf_loss
        return total, {"policy_loss": policy_loss.detach(), "vf_loss": vf_loss.detach(),
                       "total_loss": total.detach(),
                       "vf_explained_var": explained_variance(mb["returns"], values), **stats}


class MARWIL(Algorithm):
    """MARWIL from ``input``: whole episodes read (or sampled), one update, repeated."""

    config_class = MARWILConfig
    default_policy_class = MARWILTorchPolicy

    def __init__(self, config: MARWILConfig | dict[str, Any] | None = None, env: Any = None,
                 logger_creator: Any = None) -> None:
        config = trainer_config(self.config_class, config, env, logger_creator)  # RLlib's forms
        config.validate()
        # The data is read and checked against the spaces before any process starts. With
        # env runners, each reads its shard of the files (offline/sharded.py) and serves
        # fragments, drawn by the input's shares: the driver checks only each first file.
        self.input_spaces = input_spaces(config, self._spaces)
        self.sources = open_input(config, self.input_spaces,
                                  first_file_only=config.num_env_runners > 0)
        self.sharded = config.num_env_runners > 0 and any(d for _, d in self.sources)
        if self.sharded and config.observation_filter != "NoFilter":
            raise ConfigError(f"observation_filter {config.observation_filter!r} normalises a "
                              "dataset the driver reads (num_env_runners 0): with env runners "
                              "each reads a shard of it, which the filter does not see; set "
                              "num_env_runners to 0 or observation_filter to 'NoFilter'")
        super().__init__(config)

    def _initial_obs_filter(self) -> Any:
        """``observation_filter`` starts from the statistics of the data read here (the
        driver normalises what it reads with them; runners sampling beside it add theirs)."""
        return dataset_filter([d for _, d in self.sources if d is not None],
                              self.config.observation_filter, self.obs_space)

    def training_step(self) -> dict[str, dict[str, float]]:
        cfg, fragments, sampled = self.config, [], False
        for share, dataset in [] if self.sharded else self.sources:
            steps = max(1, round(share * cfg.train_batch_size))
            if dataset is None:
                with self.timer("sample_time_s"):
                    fragments += synchronous_parallel_sample(self.env_runners, max_env_steps=steps)
                sampled = True
            else:  # multi-agent: each policy its share, from its own agents' trajectories
                read = [filtered(dataset.sample(steps, policy_id=pid), self.obs_filter)
                        for pid in self.input_spaces]
                self.env_runners.record([_read_count(f) for f in read])
                fragments += read
        if self.sharded:  # the runners' shards (and envs, in a mix) by the shares
            with self.timer("sample_time_s"):
                fragments = synchronous_parallel_sample(self.env_runners,
                                                        max_env_steps=cfg.train_batch_size)
            sampled = any(d is None for _, d in self.sources)  # the envs act on the weights
        by_policy: dict[str, list[dict[str, Any]]] = {}
        for f in per_policy(fragments):
            by_policy.setdefault(f.get("policy_id", DEFAULT_POLICY_ID), []).append(f)
        with self.timer("learn_time_s"):
            stats = self.learner_group.update_from_batch(
                merge_by_policy([f for fs in by_policy.values() for f in common_columns(fs)]),
                timesteps=self.timesteps_sampled)
        if sampled:
            self.env_runners.sync_weights()
        return stats

    def iteration_result(self, start: float, learner_stats: dict[str, dict[str, Any]]
                         ) -> dict[str, Any]:
        """The iteration's result with the dataset's counts and the off-policy estimates
        (before Algorithm.train adds the evaluation and calls on_train_result)."""
        result = super().iteration_result(start, learner_stats)
        # RLlib's old stack counts the rows it trains on as agent steps trained too
        result["num_agent_steps_trained"] = result["num_env_steps_trained"]
        datasets = [d for _, d in self.sources if d is not None]
        if datasets:
            shards = ([s for s in self.env_runners.foreach_env_runner("offline_stats") if s]
                      if self.sharded else [d.stats() for d in datasets])
            result["offline"] = {
                "num_records_skipped": sum(d["num_records_skipped"] for d in shards),
                "skipped": [p for d in shards for p in d["skipped"]][:5],
                "num_episodes": sum(d["num_episodes"] for d in shards),
                "num_steps": sum(d["num_steps"] for d in shards)}
            if self.sharded:  # each runner's files and what it served
                result["offline"]["env_runners"] = shards
            methods = self.config.off_policy_estimation_methods
            # single-agent runs only; with env runners, on the episodes of each source's
            # first file, which the driver read to check the data
            if methods and None in self.input_spaces:
                episodes = [filtered(e, self.obs_filter) for e in
                            datasets[0].draw(self.config.off_policy_estimation_episodes)]
                result["off_policy_estimation"] = estimate(
                    methods, self.get_policy(), episodes, self.config.gamma)
        return result


def _read_count(fragment: dict[str, Any]) -> dict[str, Any]:
    """What the result counts of a fragment read from a dataset on the driver: its steps,
    as sampled, as RLlib counts offline rows (a runner's shard is counted the same way as it
    serves them); no episodes, which only the evaluation runners play."""
    count = {"env_steps": fragment["env_steps"], "episodes": []}
    if fragment.get("policy_id") is not None:  # multi-agent: its agents' steps
        count["agent_steps"] = fragment["env_steps"]
    return count


def input_spaces(config: MARWILConfig, single: Any) -> dict[str | None, tuple[Any, Any]]:
    """What ``input`` must fit: ``{None: single(config)}`` for a single-agent env; for a
    MultiAgentEnv, ``{policy_id: spaces of the first agent mapped to it}`` (each policy
    trains on its own agents' steps, picked by the data's policy_id column)."""
    from rlmesh.driver.policies import probe
    from rlmesh.config.multi_agent import mapping_function, policies_as_data
    from rlmesh.env.multi_agent_env import is_multi_agent
    from rlmesh.roles.multi_agent_sampler import MultiAgentEpisode, map_agent

    env = probe(config) if config.policy_server_address is None else None
    if env is None or not is_multi_agent(env):
        return {None: single(config)}
    entries = policies_as_data(config.policies or [DEFAULT_POLICY_ID])
    mapping, episode, out = mapping_function(config, entries), MultiAgentEpisode(0, 0), {}
    for aid in env.unwrapped.possible_agents:
        out.setdefault(map_agent(mapping, aid, episode, entries),
                       (env.unwrapped.get_observation_space(aid),
                        env.unwrapped.get_action_space(aid)))
    return out

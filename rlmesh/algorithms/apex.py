"""APEX (Horgan et al. 2018): distributed prioritized experience replay, for DQN (``APEX``)
and DDPG (``APEX_DDPG``).

Runners act with their own exploration (APEX DQN: runner i of N keeps epsilon
0.4 ** (1 + 7 (i - 1) / (N - 1))) and stream fragments into replay shards
(``roles/replay_shard.py``), which store their n-step transitions. The learner is the learner
actor of every asynchronous algorithm (in the driver's process with ``num_learners`` 0, else
a process of its own), fed by the shards (``roles/replay_input.py``): it keeps
``replay_sample_requests_in_flight`` sample requests per shard outstanding, makes one
gradient step on each batch that comes back, sends the TD errors to that batch's shard as
its items' priorities, and publishes the weights every ``broadcast_interval`` updates. With
``training_intensity`` the shards hold both sides to that many samples trained per env step
sampled. With one shard, the buffer lives in the driver, where a learner in the driver
samples it without a socket.

An iteration waits until ``min_sample_timesteps_per_iteration`` env steps were sampled,
then gathers what the runners, the learner and the shards did meanwhile.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import numpy as np

from rlmesh.algorithms.apex_config import ApexDDPGConfig, ApexDQNConfig
from rlmesh.algorithms.ddpg import DDPGTorchPolicy, check_box_actions
from rlmesh.algorithms.dqn import DQNTorchPolicy, check_discrete
from rlmesh.algorithms.off_policy import OffPolicy
from rlmesh.driver.async_mesh import ApexMesh
from rlmesh.driver.learner_failure import learner_calls
from rlmesh.driver.mesh import Totals
from rlmesh.config.base import ConfigError
from rlmesh.env.registry import space_to_data
from rlmesh.rl.replay import (ReplayMemoryError, SumTree, check_memory, columns_nbytes,
                              transition_columns)

__all__ = ["Apex", "ApexDQN", "ApexDQNConfig", "ApexDDPG", "ApexDDPGConfig"]

POLL_S = 0.1  # how often an iteration collects what the runners sampled


class Apex(OffPolicy):
    """The APEX algorithm: the shards and the learner run on their own; an iteration waits
    and reports. ``ApexDQN`` and ``ApexDDPG`` name the loss (their policy) and the action
    spaces they take."""

    mesh_class = ApexMesh
    supports_multi_agent = False  # replay shards hold one policy's transitions
    mesh: ApexMesh

    def _policy_specs(self) -> dict[str, dict[str, Any]]:
        # Runs before any process starts: the shards' memory together is checked here.
        self.check_spaces(self.obs_space, self.action_space)
        rb = self.config.replay_settings()
        nbytes = columns_nbytes(rb["capacity"], transition_columns(self.obs_space,
                                                                   self.action_space))
        if self.config.prioritized_replay:
            nbytes += self.config.num_replay_buffer_shards * SumTree.nbytes(
                rb["capacity"] // self.config.num_replay_buffer_shards)
        try:
            check_memory(nbytes, "replay shards")
        except ReplayMemoryError as e:
            raise ConfigError(str(e)) from None
        self.replay = None  # the shards hold it (the local one: set once it is started)
        # Past OffPolicy's: it would build a buffer of the whole capacity in the driver.
        return super(OffPolicy, self)._policy_specs()

    def _on_started(self) -> None:
        # The replay shards (spaces as data); Algorithm then connects the learners' update
        # loops fed by them and the runners' streams into the shards.
        self.mesh.build("replay", obs_space=space_to_data(self.obs_space),
                        action_space=space_to_data(self.action_space))
        # One shard in the driver: OffPolicy checkpoints its buffer (store_buffer_in_checkpoints).
        self.replay = self.mesh.local_shard
        self._inserted = Totals()  # transitions added, summed over shard restarts
        self._num_updates = 0
        self._returns_by_runner: dict[str, deque[float]] = {}

    def training_iteration(self) -> dict[str, Any]:
        """One iteration: at least ``min_sample_timesteps_per_iteration`` env steps sampled
        while the learner trains on; what happened, as one result (Algorithm.train adds
        the evaluation and calls on_train_result)."""
        start = time.perf_counter()
        with learner_calls(self):
            sampled = self._wait_for_samples()
            learners = self.mesh.learners.metrics()
        shards = self.mesh.shards.stats()
        episodes = [{"episodes": s["episodes"],
                     "num_nonfinite_steps_skipped": s.get("num_nonfinite_steps_skipped", 0),
                     "num_episodes_unlisted": s.get("num_episodes_unlisted", 0),
                     **({"runner_metrics": s["runner_metrics"]} if "runner_metrics" in s else {})}
                    for s in sampled]
        result = self._finish_iteration(
            start, episodes, sum(int(s["env_steps"]) for s in sampled),
            sum(m["num_env_steps_trained"] for m in learners), learners[0]["stats"],
            learn_time=max(m["learner_busy_s"] for m in learners))
        result.update(self._replay_metrics(shards, learners, result["time_this_iter_s"]))
        result.update(self._per_runner_returns(sampled))
        return result

    def _wait_for_samples(self) -> list[dict[str, Any]]:
        """What the runners sampled, polled until it holds the iteration's env steps; the
        learner is asked how it does at every poll (a failed one ends the run)."""
        sampled: list[dict[str, Any]] = []
        steps = 0
        while True:
            if not self.mesh.runners.num_live():
                raise RuntimeError("every env runner is gone (see the log for why)")
            got = self.mesh.runners.pop_sampled()
            steps += sum(int(s["env_steps"]) for s in got)
            sampled.extend(got)
            if steps >= self.config.min_sample_timesteps_per_iteration:
                return sampled
            self.mesh.learners.on_rank0("num_updates")  # raises the learner's error (or death), if it stopped
            time.sleep(POLL_S)

    def _replay_metrics(self, shards: list[dict[str, Any]], learners: list[dict[str, Any]],
                        elapsed: float) -> dict[str, Any]:
        for s in shards:  # a restarted shard counts from 0 under a new incarnation
            self._inserted.add(f"replay_shard-{s['index']}/{s['incarnation']}",
                               {"num_added": s["num_added"]})
        updates = sum(m["num_updates"] for m in learners)
        trained = sum(m["num_env_steps_trained"] for m in learners)
        busy_s = max(m["learner_busy_s"] for m in learners)
        self._num_updates += updates
        return {
            "num_learner_updates": updates,
            "num_learner_updates_total": self._num_updates,
            "learner_updates_per_s": updates / elapsed if elapsed else 0.0,
            "learner_samples_per_s": trained / elapsed if elapsed else 0.0,
            "learner_busy_fraction": busy_s / elapsed if elapsed else 0.0,
            "replay_buffer_num_added": self._inserted["num_added"],
            "replay_buffer_num_transitions": sum(s["size"] for s in shards),
            "replay_buffer_size_bytes": sum(s["size_bytes"] for s in shards),
            "num_replay_shards_reporting": len(shards),
            "num_replay_shard_restarts": self.mesh.shards.restarts,
            # Dropped by the shards (sampled before they restarted) and by the learners
            # (told of the restart before sending them).
            "num_stale_priority_updates": (
                sum(s["num_stale_priority_updates"] for s in shards)
                + sum(m["num_stale_priority_updates_dropped"] for m in learners)),
            "learner_queue_size": sum(m["learner_queue_size"] for m in learners),
            # Sample requests the shards answered with nothing (warming up, or the learner
            # ahead of training_intensity), and the longest run of them from one shard.
            "num_sample_refusals": sum(m.get("num_sample_refusals", 0) for m in learners),
            "max_sample_refusals_in_a_row": max(
                m.get("max_sample_refusals_in_a_row", 0) for m in learners),
            "replay_shards": shards,
        }

    def _per_runner_returns(self, sampled: list[dict[str, Any]]) -> dict[str, Any]:
        """Each runner's mean return over its last metrics_num_episodes_for_smoothing
        episodes: runners explore differently (APEX's epsilons), and the mean over all of
        them is held down by the most exploring one, whose episodes are also the most."""
        for s in sampled:
            returns = self._returns_by_runner.setdefault(
                s["runner"], deque(maxlen=self.config.metrics_num_episodes_for_smoothing))
            returns.extend(e["return"] for e in s["episodes"])
        means = {name: float(np.mean(r)) for name, r in sorted(self._returns_by_runner.items())
                 if r}
        last = max(means, key=lambda n: int(n.rpartition("-")[2]), default=None)
        return {"episode_reward_mean_by_runner": means,
                # The last runner explores least (epsilon 0.4 ** 8 for APEX DQN).
                "episode_reward_mean_least_exploring": means[last] if last else float("nan")}


class ApexDQN(Apex):
    """APEX with DQN's loss (double Q, dueling, n-step, prioritized replay)."""

    config_class = ApexDQNConfig
    default_policy_class = DQNTorchPolicy

    def check_spaces(self, obs_space: Any, action_space: Any) -> None:
        check_discrete(action_space)


class ApexDDPG(Apex):
    """APEX with DDPG's actor and critics (RLlib's APEX_DDPG)."""

    config_class = ApexDDPGConfig
    default_policy_class = DDPGTorchPolicy

    def check_spaces(self, obs_space: Any, action_space: Any) -> None:
        check_box_actions("APEX_DDPG", action_space)

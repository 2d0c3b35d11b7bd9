"""APEX (Horgan et al. 2018): distributed prioritized experience replay, for DQN (``APEX``)
and DDPG (``APEX_DDPG``).

Runners act with their own exploration (APEX DQN: runner i of N keeps epsilon
0.4 ** (1 + 7 (i - 1) / (N - 1))) and stream fragments into replay shards
(``roles/replay_shard.py``), which store their n-step transitions. The learner runs in the
driver on a thread of its own: it takes batches the shards sent on its credits, makes one
gradient step on each, sends the TD errors back to the shard that holds those transitions as
their priorities, and broadcasts the weights every ``broadcast_interval`` updates. With
``training_intensity`` it trains at most that many samples per env step sampled. With one
shard, the buffer lives in the driver (runners stream into it there) and the learner thread
samples it and sets its priorities directly, with no socket in between.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
import traceback
from collections import deque
from typing import Any

import numpy as np

from rlmesh.driver.algorithm import Algorithm, LearnerFailed
from rlmesh.algorithms.apex_config import ApexDDPGConfig, ApexDQNConfig
from rlmesh.algorithms.ddpg import DDPGTorchPolicy, check_box_actions
from rlmesh.algorithms.dqn import DQNTorchPolicy, check_discrete
from rlmesh.algorithms.off_policy import OffPolicy, replay_beta
from rlmesh.driver.mesh import ApexMesh, Totals
from rlmesh.config.base import ConfigError
from rlmesh.envs import space_to_data
from rlmesh.rl.columns import DEFAULT_POLICY_ID
from rlmesh.rl.replay import (ReplayMemoryError, SumTree, check_memory, columns_nbytes,
                              transition_columns)

__all__ = ["Apex", "ApexDQN", "ApexDQNConfig", "ApexDDPG", "ApexDDPGConfig"]

log = logging.getLogger(__name__)

POLL_S = 0.1  # how often train() collects what the runners sampled


class Apex(OffPolicy):
    """The APEX plumbing: shards, the learner thread, the iteration's result. ``ApexDQN``
    and ``ApexDDPG`` name the loss (their policy) and the action spaces they take."""

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
        self._stop = threading.Event()
        self._learn_lock = threading.Lock()  # the model: learner thread vs. save/restore
        return Algorithm._policy_specs(self)

    def _on_started(self) -> None:
        cfg = self.config
        self._run(self.mesh.start_shards(space_to_data(self.obs_space),
                                         space_to_data(self.action_space)))
        self._run(self.mesh.start_async())
        self._local = self.mesh.local_shard
        if self._local is not None:  # its get_state/set_state: OffPolicy's checkpoints
            self.replay = self._local
        self._batches: queue.Queue[dict[str, Any]] = queue.Queue()
        self._inserted = Totals()  # transitions added, summed over shard restarts
        self._report = _Report()
        self._trained_samples = 0
        self._num_updates = 0
        self._learner_error: str | None = None
        self._publishing: Any = None
        self._returns_by_runner: dict[str, deque[float]] = {}
        loop = self._loop.loop

        async def pullers() -> list[asyncio.Task[None]]:
            self._credits = [asyncio.Semaphore(cfg.replay_sample_requests_in_flight)
                             for _ in self.mesh.shards]
            return [asyncio.ensure_future(self._pull(j)) for j in range(len(self.mesh.shards))]

        # The local shard is sampled by the learner thread itself: no pullers, no credits.
        self._pullers = ([] if self._local is not None
                         else asyncio.run_coroutine_threadsafe(pullers(), loop).result())
        self._thread = threading.Thread(target=self._learn_loop, name="rlmesh.apex-learner",
                                        daemon=True)
        self._thread.start()

    def _run(self, coro: Any) -> Any:
        return self._loop.run(coro)

    # --- the learner's input: batches pulled from the shards on credit (driver's loop) ---

    async def _pull(self, j: int) -> None:
        """Keep ``replay_sample_requests_in_flight`` sample calls of shard j in flight or
        waiting to be trained on; a credit comes back once the learner takes a batch."""
        size, credits = self.config.train_batch_size, self._credits[j]
        while not self._stop.is_set():
            await credits.acquire()
            shard = self.mesh.shards[j]
            try:
                got = await shard.call("sample", size, self._beta(), timeout=30)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # restarting: try again shortly
                log.debug("sampling %s failed: %s", shard.name, exc)
                got = None
            if got is None:  # not enough stored yet (or down)
                credits.release()
                await asyncio.sleep(0.05)
                continue
            self._batches.put(got)

    def _beta(self) -> float:
        return replay_beta(self.config, self.timesteps_total)

    # --- the learner thread ---

    def _learn_loop(self) -> None:
        try:
            while not self._stop.is_set():
                if not self._may_train():
                    time.sleep(0.002)
                    continue
                got = self._next_batch()
                if got is not None:
                    self._learn_on(got)
        except Exception:
            if not self._stop.is_set():
                self._learner_error = traceback.format_exc()
                log.error("APEX learner stopped: %s", self._learner_error)

    def _next_batch(self) -> dict[str, Any] | None:
        """A batch from the local shard, or one a puller brought (its credit given back)."""
        if self._local is not None:
            got = self._local.sample(self.config.train_batch_size, self._beta())
            if got is None:  # not enough stored yet
                time.sleep(0.05)
            return got
        try:
            got = self._batches.get(timeout=0.2)
        except queue.Empty:
            return None
        self._loop.loop.call_soon_threadsafe(self._credits[got["shard"]].release)
        return got

    def _may_train(self) -> bool:
        """training_intensity: at most that many samples trained per env step sampled
        since learning started (as the synchronous off-policy algorithms)."""
        cfg = self.config
        learned = self.timesteps_total - cfg.num_steps_sampled_before_learning_starts
        return (cfg.training_intensity is None
                or self._trained_samples < cfg.training_intensity * learned)

    def _learn_on(self, got: dict[str, Any]) -> None:
        """One gradient step on a shard's batch; its TD errors back to that shard."""
        cols = got["columns"]
        idx = cols.pop("batch_indexes")
        batch = {k: np.asarray(v)[None] for k, v in cols.items()}  # [K=1, B, ...]
        started = time.perf_counter()
        with self._learn_lock:
            stats = self.learner_group.local.update_from_batch({DEFAULT_POLICY_ID: batch},
                                                               self.timesteps_total)
        pstats = stats[DEFAULT_POLICY_ID]
        td = np.asarray(pstats.pop("td_error")).reshape(-1)
        if self._local is not None:
            if self.config.prioritized_replay:
                self._local.update_priorities(idx, td, got["incarnation"])
        else:
            shard = self.mesh.shards[got["shard"]]
            asyncio.run_coroutine_threadsafe(
                self._send_priorities(shard, idx, td, got["incarnation"]), self._loop.loop)
        self._trained_samples += len(td)
        self._num_updates += 1
        self._report.add(pstats, time.perf_counter() - started)
        if self._num_updates % self.config.broadcast_interval == 0:
            self._broadcast()

    async def _send_priorities(self, shard: Any, idx: np.ndarray, td: np.ndarray,
                               incarnation: str) -> None:
        if not self.config.prioritized_replay:
            return
        try:
            await shard.tell("update_priorities", idx, td, incarnation)
        except Exception as exc:  # the shard is restarting: its items are gone anyway
            log.debug("priorities for %s lost: %s", shard.name, exc)

    def _broadcast(self) -> None:
        """The weights to the param server, unless the last broadcast is still on its way
        (one in flight: the runners would skip to the newest anyway)."""
        if self._publishing is not None and not self._publishing.done():
            return
        with self._learn_lock:
            weights = self.learner_group.local.get_weights()
        self._publishing = asyncio.run_coroutine_threadsafe(self.mesh.publish(weights),
                                                            self._loop.loop)

    # --- the driver's iteration ---

    def training_iteration(self) -> dict[str, Any]:
        """One iteration: at least ``min_sample_timesteps_per_iteration`` env steps sampled
        while the learner trains on; what happened, as one result (Algorithm.train adds
        the evaluation and calls on_train_result)."""
        start = time.perf_counter()
        steps, sampled = 0, []
        while True:
            if self._learner_error is not None:
                raise LearnerFailed(f"the APEX learner failed:\n{self._learner_error}")
            if not self.mesh.num_live_runners():
                raise RuntimeError("every env runner is gone (see the log for why)")
            got = self._run(self.mesh.pop_sampled())
            new = sum(int(s["env_steps"]) for s in got)
            self.timesteps_total += new  # the learner thread's gate and schedules read it
            steps += new
            sampled.extend(got)
            if steps >= self.config.min_sample_timesteps_per_iteration:
                break
            time.sleep(POLL_S)
        shards = self._run(self.mesh.shard_stats())
        report, self._report = self._report, _Report()
        elapsed = time.perf_counter() - start
        self.iteration += 1
        self.time_total_s += elapsed
        trained = report.updates * self.config.train_batch_size
        self.num_env_steps_trained += trained
        episodes = [{"episodes": s["episodes"],
                     "num_nonfinite_steps_skipped": s.get("num_nonfinite_steps_skipped", 0)}
                    for s in sampled]
        result = self._result(episodes, steps, {DEFAULT_POLICY_ID: report.means()}, elapsed,
                              elapsed, report.busy_s)
        result.update(self._replay_metrics(shards, report, elapsed))
        result.update(self._per_runner_returns(sampled))
        return result

    def _replay_metrics(self, shards: list[dict[str, Any]], report: "_Report",
                        elapsed: float) -> dict[str, Any]:
        for s in shards:  # a restarted shard counts from 0 under a new incarnation
            self._inserted.add(f"replay_shard-{s['index']}/{s['incarnation']}",
                               {"num_added": s["num_added"]})
        return {
            "num_learner_updates": report.updates,
            "num_learner_updates_total": self._num_updates,
            "learner_updates_per_s": report.updates / elapsed if elapsed else 0.0,
            "learner_samples_per_s": (report.updates * self.config.train_batch_size / elapsed
                                      if elapsed else 0.0),
            "learner_busy_fraction": report.busy_s / elapsed if elapsed else 0.0,
            "replay_buffer_num_added": self._inserted["num_added"],
            "replay_buffer_num_transitions": sum(s["size"] for s in shards),
            "replay_buffer_size_bytes": sum(s["size_bytes"] for s in shards),
            "num_replay_shards_reporting": len(shards),
            "num_replay_shard_restarts": self.mesh.shard_restarts,
            "num_stale_priority_updates": sum(s["num_stale_priority_updates"] for s in shards),
            "learner_queue_size": self._batches.qsize(),
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

    # --- checkpoints and lifecycle: the learner thread pauses around them ---

    def save(self, checkpoint_dir: Any = None) -> str:
        with self._learn_lock:
            return super().save(checkpoint_dir)

    def restore(self, path: Any, trust_code: bool = False) -> None:
        with self._learn_lock:
            super().restore(path, trust_code)

    def stop(self) -> None:
        stop = getattr(self, "_stop", None)
        if stop is not None and getattr(self, "_loop", None) is not None:
            stop.set()
            for task in getattr(self, "_pullers", ()):
                self._loop.loop.call_soon_threadsafe(task.cancel)
            thread = getattr(self, "_thread", None)
            if thread is not None:
                thread.join(10)
        super().stop()


class _Report:
    """The learner's statistics summed between two results, and its busy time."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.counts: dict[str, float] = {}
        self.updates = 0
        self.busy_s = 0.0

    def add(self, stats: dict[str, Any], busy_s: float) -> None:
        for key, value in stats.items():
            if isinstance(value, (int, float, np.number)) and np.isfinite(value):
                self.sums[key] = self.sums.get(key, 0.0) + float(value)
                self.counts[key] = self.counts.get(key, 0) + 1
        self.updates += 1
        self.busy_s += busy_s

    def means(self) -> dict[str, float]:
        return {k: v / self.counts[k] for k, v in self.sums.items()}


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

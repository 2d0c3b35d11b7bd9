"""The learner actor, one for every algorithm. Synchronous algorithms (PPO, A2C) call
``update`` with a train batch; asynchronous ones (IMPALA, APPO) ``start_async`` it, and it
takes streams of fragments or train batches, updates in one straight loop on a thread of its
own and publishes weights to the param server every ``broadcast_interval`` updates.

The event loop only receives and queues; training runs on the learner's thread. With
``world_size`` > 1 the learners average gradients with torch.distributed and rank 0 publishes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import threading
import time
import traceback
from collections import deque
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from rlmesh.runtime.import_path import SentCode, import_object, named_roots
from rlmesh.rl.columns import DEFAULT_POLICY_ID
from rlmesh.roles.learner import learner_class_of
from rlmesh.roles.learner_input import BatchBuilder, BatchQueue, LearnerInput
from rlmesh.roles.replay_input import InputClosed, ReplayFeeder, ReplayInput
from rlmesh.runtime import Actor
from rlmesh.runtime.protocol import Protocol

if TYPE_CHECKING:
    from rlmesh.config.base import AlgorithmConfig

log = logging.getLogger(__name__)

POLL_S = 0.5  # the update thread's longest wait before it looks at the stop flag again


def batch_size_per_learner(cfg: AlgorithmConfig) -> int:
    if cfg.train_batch_size_per_learner is not None:
        return cfg.train_batch_size_per_learner
    return -(-cfg.train_batch_size // max(1, cfg.num_learners))


class LearnerActor(Actor):
    """One learner (rank ``rank`` of ``world_size``) of the policies in ``policy_specs``.

    Synchronous: ``update(batches, timesteps)``. Asynchronous, after ``start_async``:
    ``add_fragment`` (a stream from runners) joins fragments into train batches here;
    ``add_batch`` (a stream from aggregators) takes batches they joined.
    """

    protocol = Protocol(
        calls=("update", "apply_gradients", "start_async", "start_replay",
               "replay_shard_restarted", "add_fragment", "dp_listen", "set_dp_address",
               "publish", "pop_metrics", "num_updates", "get_weights", "set_weights",
               "add_policy", "remove_policy", "get_state", "set_state"),
        streams=("add_fragment", "add_batch"),
        test_hooks=("weight_digests", "pid"),
    )

    # The update thread needs the GIL between calls: the loop must not poll for them.
    spin_wait_us = 0

    def __init__(self, config: dict[str, Any], config_cls: str, policy_specs: dict[str, Any],
                 rank: int = 0, world_size: int = 1, dp_address: str = "",
                 param_server: str = "param_server", code_roots: list[str] | None = None,
                 main_script: str | None = None) -> None:
        from concurrent.futures import ThreadPoolExecutor

        from rlmesh.policy.device import learner_device

        cfg = self.config = import_object(config_cls, "config class").from_dict(config)
        device = learner_device(cfg.num_gpus_per_learner, rank, cfg.fake_gpus)
        # What code ``add_policy`` messages may name: what this learner was started with
        # (its config and specs, and the driver's ``startup_code``), never a file but the script.
        trust = SentCode({*(code_roots or ()), *named_roots({"config": config,
                                                             "policies": policy_specs})},
                         main_script)
        # RLlib's learner_class: a user's Learner subclass, named by import path.
        self.learner = learner_class_of(cfg)(cfg, policy_specs, str(device), trust)
        self.rank, self.world_size, self.dp_address = rank, world_size, dp_address
        # The asynchronous pipeline's input (IMPALA's settings): made by start_async.
        self.queue: BatchQueue | None = None
        self.input: LearnerInput | None = None
        self.builder: BatchBuilder | None = None
        # APEX's input instead: batches sampled from replay shards (start_replay).
        self.replay: ReplayInput | None = None
        self._feeder: ReplayFeeder | None = None
        # How long a data-parallel collective waits for the other ranks.
        self._dp_timeout = float(getattr(cfg, "learner_queue_timeout", 300.0))
        self._ps_name = param_server
        self._lock = threading.Lock()  # the model: update thread vs. weights and state calls
        self._stop = threading.Event()
        self._error: str | None = None
        self.version = 0  # policy version: +1 per update and per set_weights/set_state
        self._published = 0
        self._num_published = 0  # weights this learner sent the param server
        self._publish_error: str | None = None
        self._outbox: tuple[int, dict[str, Any]] | None = None
        self._outbox_ready = asyncio.Event()
        self._sending = False  # a snapshot on its way to the param server
        self._published_event = asyncio.Event()
        self._received_steps = 0
        self._report = _Report()
        # Data-parallel learners: a digest of the weights after each recent update, so a
        # test can check that every rank holds the same weights at every version.
        self._digests: deque[tuple[int, str]] = deque(maxlen=512)
        # Synchronous updates run here: one thread, so torch's state stays on one thread.
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"rlmesh.learner-{rank}")
        self._thread: threading.Thread | None = None
        self._joined = world_size == 1
        self._dp_listen: Any = None  # rank 0's rendezvous socket, until the group forms

    async def on_start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._ps = await self.job.get_actor(self._ps_name) if self.rank == 0 else None
        # An update far longer than usual is reported by the supervisor (stuck_learner_warn_s).
        self.job.diagnostics.add_probe(f"learner-{self.rank}", self.learner.update_clock.probe)
        self._publisher = asyncio.ensure_future(self._publish_loop())

    async def on_stop(self) -> None:
        self._stop.set()
        self._publisher.cancel()
        if self._feeder is not None:
            self._feeder.stop()
        if self._thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join, 5.0)
        self._executor.shutdown(wait=False, cancel_futures=True)

    # --- synchronous algorithms ---

    async def update(self, batches: dict[str, Any] | None, timesteps: int,
                     episodes: list[dict[str, Any]] | None = None,
                     **kwargs: int | None) -> dict[str, dict[str, float]]:
        """One update of each policy from its batch (``{policy_id: time-major batch}``), or
        from ``episodes`` (``Learner.update_from_episodes``: fragments or finished episodes);
        statistics by policy id. Data-parallel peers must be called with their shards at the
        same time (and the same ``num_minibatches``)."""
        return await self._loop.run_in_executor(self._executor, self._update_now, batches,
                                                timesteps, episodes, kwargs)

    def _update_now(self, batches: dict[str, Any] | None, timesteps: int,
                    episodes: list[dict[str, Any]] | None,
                    kwargs: dict[str, Any]) -> dict[str, dict[str, float]]:
        if not self._joined:
            self._join_group()
            self._joined = True
        with self._lock, self._logged("update"):
            if episodes is not None:
                stats = self.learner.update_from_episodes(episodes, timesteps, **kwargs)
            else:
                stats = self.learner.update_from_batch(batches, timesteps, **kwargs)
        if self.world_size > 1:
            self._digests.append((self.learner.num_updates, self._digest()))
        return stats

    async def apply_gradients(self, gradients: dict[str, Any], timesteps: int) -> None:
        """One optimizer step per policy with gradients computed elsewhere (A3C); every
        data-parallel rank is given the same gradients, so their weights stay equal."""
        def step() -> None:
            with self._lock, self._logged("apply_gradients"):
                self.learner.apply_gradients(gradients, timesteps)

        await self._loop.run_in_executor(self._executor, step)

    @contextlib.contextmanager
    def _logged(self, call: str) -> Iterator[None]:
        """A driver's call that raises: the caller gets the error, and this log (not the
        console: ``detail``) the traceback, which the driver's one line points to."""
        try:
            yield
        except Exception as exc:
            log.error("learner %d: %s raised %s: %s\n%s", self.rank, call, type(exc).__name__,
                      _first_line(exc), traceback.format_exc().rstrip(), extra={"detail": True})
            raise

    # --- asynchronous algorithms ---

    def start_async(self) -> None:
        """Start the update loop over the batches that arrive (IMPALA, APPO)."""
        if self._thread is None:
            cfg = self.config
            self.queue = BatchQueue(cfg.learner_queue_size)
            self.input = LearnerInput(
                self._take, buffer_size=cfg.minibatch_buffer_size, num_passes=cfg.num_epochs,
                replay_proportion=cfg.replay_proportion, replay_slots=cfg.replay_buffer_num_slots,
                max_policy_lag=cfg.max_policy_lag,
                seed=None if cfg.seed is None else cfg.seed + 7 * self.rank)
            self.builder = BatchBuilder(batch_size_per_learner(cfg))
            self._thread = threading.Thread(target=self._run, name=f"rlmesh.learner-{self.rank}",
                                            daemon=True)
            self._thread.start()

    async def start_replay(self, shards: list[str]) -> None:
        """Start the update loop over batches sampled from the replay shards named
        ``shards`` (by index; APEX): ``replay_sample_requests_in_flight`` sample requests
        kept outstanding per shard, each batch's TD errors sent back to its shard. The
        only shard, served in this process (the driver's), is sampled directly."""
        if self._thread is not None:
            return
        cfg = self.config
        local = None
        if len(shards) == 1:
            with contextlib.suppress(KeyError, AttributeError):
                local = self.job.local_actor(shards[0]).core
        handles = [None] if local is not None else [await self.job.get_actor(n) for n in shards]
        self.replay = ReplayInput(
            len(shards), credits=cfg.replay_sample_requests_in_flight,
            batch_size=batch_size_per_learner(cfg), beta=cfg.replay_beta,
            prioritized=cfg.prioritized_replay, local=local, stopped=self._stop.is_set)
        self._feeder = ReplayFeeder(self.replay, handles)
        self.replay.on_credit = self._feeder.wake
        self.input = self.replay  # type: ignore[assignment]  (LearnerInput's contract)
        self._thread = threading.Thread(target=self._run, name=f"rlmesh.learner-{self.rank}",
                                        daemon=True)
        self._thread.start()

    def replay_shard_restarted(self, index: int) -> None:
        """The driver saw replay shard ``index`` restart: its former life's requests and
        priorities are given up on."""
        if self._feeder is not None:
            self._feeder.restarted(index)

    # --- input (event loop) ---

    async def add_fragment(self, fragment: dict[str, Any]) -> None:
        """A runner's fragment; a train batch goes to the queue once enough have come."""
        if self.builder is None:
            raise RuntimeError("this learner takes fragments only after start_async()")
        batch = self.builder.add(fragment)  # junk: a ValueError back to its sender, counted
        self._received_steps += int(fragment["env_steps"])
        if batch is not None:
            await self.queue.put(batch)

    async def add_batch(self, batch: dict[str, Any]) -> None:
        """A train batch an aggregator joined (see ``BatchBuilder``)."""
        if self.queue is None:
            raise RuntimeError("this learner takes batches only after start_async()")
        self._received_steps += int(batch["env_steps"])
        await self.queue.put(batch)

    # --- the update loop (its own thread) ---

    def _take(self, timeout: float) -> dict[str, Any]:
        if self._stop.is_set():
            raise _Stopped
        return self.queue.get(min(timeout, POLL_S))

    def _run(self) -> None:
        try:
            if not self._joined:
                self._join_group()
                self._joined = True
            while not self._stop.is_set():
                waited = time.perf_counter()
                # (APEX's config has no learner_queue_timeout: its input waits for the shards.)
                batch, is_new = self.input.next(self.version, self._dp_timeout)
                started = time.perf_counter()
                self._update(batch, is_new)
                self._report.wait_s += started - waited
                self._report.busy_s += time.perf_counter() - started
        except (_Stopped, InputClosed):
            return
        except Exception as exc:
            if not self._stop.is_set():
                # The cause in one line for the driver, which says it on the console; here,
                # for the log files only (``detail``), the same and the traceback.
                self._error = f"{type(exc).__name__}: {_first_line(exc)}"
                log.error("learner %d stopped: %s\n%s", self.rank, self._error,
                          traceback.format_exc().rstrip(), extra={"detail": True})

    # --- data-parallel rendezvous: rank 0 listens on its node, the driver tells every rank ---

    def dp_listen(self) -> str:
        """Rank 0: bind the rendezvous socket on this node's address (loopback on one
        machine, the node's cluster address under ``rlmesh launch``); its address."""
        from rlmesh.roles.data_parallel import listen_socket, rendezvous_address, socket_address

        if self.rank != 0:
            raise ValueError(f"learner {self.rank}: only rank 0 listens for the rendezvous")
        host = self.job.host
        # Refused before a socket opens: a public address with private_only.
        rendezvous_address(f"tcp://{host}:1", self.config.learner_rendezvous_private_only)
        if self._dp_listen is None:
            self._dp_listen = listen_socket(host)
        self.dp_address = socket_address(self._dp_listen)
        return self.dp_address

    def set_dp_address(self, address: str) -> None:
        """Where rank 0 listens (``dp_listen``), before the first update."""
        self.dp_address = address

    def _join_group(self) -> None:
        from rlmesh.roles.data_parallel import DataParallel, backend_for

        # NCCL refuses two ranks on one GPU: fractional GPUs all-reduce over gloo.
        shared = 0 < self.config.num_gpus_per_learner < 1
        listen, self._dp_listen = self._dp_listen, None  # the store owns it from here
        dp = DataParallel(self.rank, self.world_size, self.dp_address,
                          backend_for(self.learner.device, shared), self._dp_timeout,
                          device=self.learner.device, listen=listen,
                          private_only=self.config.learner_rendezvous_private_only,
                          local_host=self.job.host)
        with self._lock:
            self.learner.set_data_parallel(dp)

    def _update(self, batch: dict[str, Any], is_new: bool) -> None:
        lag = self.version - np.asarray(batch["policy_versions"])
        # Env steps sampled, near enough: what the shards took in, or the fragments received.
        timesteps = (self.replay.env_steps if self.replay is not None
                     else self._received_steps * self.world_size)
        with self._lock:
            stats = self.learner.update_from_batch(batch["policies"], timesteps, num_epochs=1)
            self.version += 1
            # A snapshot only while none is waiting or on its way (it would wait behind
            # it): copying the weights every update cost APEX's small DQN ~6% of its updates.
            due = (self.rank == 0 and self.version % self.config.broadcast_interval == 0
                   and self._outbox is None and not self._sending)
            snapshot = (self.version, self.learner.get_weights()) if due else None
            if self.world_size > 1:
                self._digests.append((self.learner.num_updates, self._digest()))
        if self.replay is not None:
            self._replayed(batch, stats)
        self._report.add(stats, lag, int(batch["env_steps"]) if is_new else 0)
        if snapshot is not None:
            self._loop.call_soon_threadsafe(self._offer, snapshot)

    def _replayed(self, batch: dict[str, Any], stats: dict[str, dict[str, Any]]) -> None:
        """A replay batch trained on: its TD errors to its shard, as the new priorities."""
        td = stats.get(DEFAULT_POLICY_ID, {}).pop("td_error", None)
        route = self.replay.trained(batch, td)
        if route is not None:
            self._loop.call_soon_threadsafe(self._feeder.send, route)

    # --- publishing (event loop): one sender, so versions reach the param server in order ---

    def _offer(self, snapshot: tuple[int, dict[str, Any]]) -> None:
        if self._outbox is None or snapshot[0] > self._outbox[0]:
            self._outbox = snapshot  # an older one not yet sent is superseded
        self._outbox_ready.set()

    async def _publish_loop(self) -> None:
        while True:
            await self._outbox_ready.wait()
            self._outbox_ready.clear()
            snapshot, self._outbox = self._outbox, None
            if snapshot is None or snapshot[0] <= self._published:
                continue
            try:
                self._sending = True
                await self._ps.call("set_weights", *snapshot)
                self._published = snapshot[0]
                self._num_published += 1
            except Exception as exc:
                # Runners keep the weights they have; the next snapshot tries again.
                log.warning("learner %d: publishing version %d failed: %s", self.rank,
                            snapshot[0], exc)
                self._publish_error = f"version {snapshot[0]}: {exc}"
            finally:
                self._sending = False
            self._published_event.set()

    async def publish(self, version: int | None = None,
                      policies: list[str] | None = None) -> int:
        """Send the current weights (of ``policies``, default all) to the param server now;
        their version. A synchronous run's driver names the version (its count, shared with
        weights it hands a runner directly): the weights go straight to the param server
        and only the version back to the driver. Without one (an asynchronous run, after
        set_weights or a restore): the next of this learner's own count, in order with the
        update loop's publications."""
        if self.rank != 0:
            return self.version
        if version is not None:  # synchronous: no update loop publishes meanwhile
            with self._lock:
                weights = self.learner.get_weights(policies)
            await self._ps.call("set_weights", version, weights)
            self.version = max(self.version, version)
            self._published = max(self._published, version)
            self._num_published += 1
            return version
        with self._lock:
            self.version += 1
            snapshot = (self.version, self.learner.get_weights())
        self._offer(snapshot)
        self._publish_error = None
        while self._published < snapshot[0]:
            self._published_event.clear()
            await self._published_event.wait()
            if self._publish_error is not None:
                raise RuntimeError(f"the param server refused the weights ({self._publish_error})")
        return snapshot[0]

    # --- the driver's calls ---

    def pop_metrics(self) -> dict[str, Any]:
        """What happened since the last call; raises the update thread's error, if any."""
        if self._error is not None:
            raise LearnerStopped(f"learner {self.rank} stopped: {self._error}")
        report, self._report = self._report, _Report()
        if self.replay is not None:
            pipeline = {**self.replay.counters, "learner_queue_size": self.replay.qsize(),
                        "num_replay_env_steps": self.replay.env_steps}
        else:
            pipeline = ({**self.input.counters, **self.builder.counters,
                         "learner_queue_size": self.queue.qsize(),
                         "pending_env_steps": self.builder.pending_steps} if self.input else {})
        return {**report.summary(), **pipeline, "rank": self.rank, "policy_version": self.version,
                "num_weights_published": self._num_published}

    def num_updates(self) -> int:
        if self._error is not None:
            raise LearnerStopped(f"learner {self.rank} stopped: {self._error}")
        return self.learner.num_updates

    def _digest(self) -> str:
        h = hashlib.sha1()
        for pid in sorted(self.learner.policies):
            for p in self.learner.policies[pid].model.parameters():
                h.update(p.detach().cpu().numpy().tobytes())
        return h.hexdigest()

    def weight_digests(self) -> list[list[Any]]:
        """``[update count, digest of the weights after that update]`` for recent updates
        (data-parallel learners only)."""
        return [list(d) for d in self._digests]

    def pid(self) -> int:
        return os.getpid()

    def get_weights(self, policy_ids: list[str] | None = None) -> dict[str, dict[str, np.ndarray]]:
        with self._lock:
            return self.learner.get_weights(policy_ids)

    def set_weights(self, weights: dict[str, dict[str, Any]]) -> None:
        with self._lock:
            self.learner.set_weights(weights)

    def add_policy(self, policy_id: str, spec: dict[str, Any], settings: dict[str, Any]) -> None:
        with self._lock:
            self.learner.add_policy(policy_id, spec, settings)

    def remove_policy(self, policy_id: str, settings: dict[str, Any]) -> None:
        with self._lock:
            self.learner.remove_policy(policy_id, settings)

    def get_state(self) -> dict[str, Any]:
        with self._lock:
            return {**self.learner.get_state(), "policy_version": self.version}

    def set_state(self, state: dict[str, Any]) -> None:
        with self._lock:
            self.learner.set_state(state)
            self.version = max(self.version, int(state.get("policy_version", 0)))


class _Stopped(Exception):
    """The learner is stopping: the update loop ends."""


#: Learner statistics that count since the learner started (not per update).
COUNTS = ("num_nonfinite_updates_skipped", "num_nonfinite_batches_skipped")


class _Report:
    """Learner statistics summed between two reports."""

    def __init__(self) -> None:
        self.sums: dict[str, dict[str, float]] = {}  # by policy id
        self.counts: dict[str, dict[str, int]] = {}  # by policy id: the latest COUNTS
        self.updates = 0
        self.env_steps = 0
        self.trained = 0
        self.lag_sum = 0.0
        self.lag_count = 0
        self.lag_max = 0
        self.wait_s = 0.0  # the update thread waiting for a batch
        self.busy_s = 0.0  # ... and updating

    def add(self, stats: dict[str, dict[str, float]], lag: np.ndarray, new_steps: int) -> None:
        for pid, policy_stats in stats.items():
            sums = self.sums.setdefault(pid, {})
            for k, v in policy_stats.items():
                if k in COUNTS:  # counts since the learner started: as they stand, not averaged
                    self.counts.setdefault(pid, {})[k] = int(v)
                else:
                    sums[k] = sums.get(k, 0.0) + float(v)
            self.trained += int(policy_stats.get("num_env_steps_trained", 0))
        self.updates += 1
        self.env_steps += new_steps
        self.lag_sum += float(lag.sum())
        self.lag_count += lag.size
        self.lag_max = max(self.lag_max, int(lag.max()) if lag.size else 0)

    def summary(self) -> dict[str, Any]:
        n = max(self.updates, 1)
        stats = {pid: {**{k: v / n for k, v in sums.items() if k != "num_env_steps_trained"},
                       **self.counts.get(pid, {})}
                 for pid, sums in self.sums.items()}
        return {"stats": stats, "num_updates": self.updates,
                "num_env_steps_trained": self.trained, "num_new_env_steps_trained": self.env_steps,
                "policy_lag_mean": self.lag_sum / self.lag_count if self.lag_count else 0.0,
                "policy_lag_max": self.lag_max,
                "learner_idle_fraction": (self.wait_s / (self.wait_s + self.busy_s)
                                          if self.wait_s + self.busy_s else 0.0),
                "learner_busy_s": self.busy_s}


class LearnerStopped(RuntimeError):
    """The update loop raised; the message is its cause in one line (the traceback is in
    the learner's log)."""


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0]


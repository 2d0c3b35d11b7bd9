"""The learner actor, one for every algorithm, fed by one source (``learner_source.py``).
Synchronous algorithms (PPO, A2C) call ``update`` with a train batch (the direct source);
asynchronous ones ``start_async`` it (a stream of fragments or train batches: IMPALA, APPO)
or ``start_replay`` it (replay shards: APEX), and it updates in one straight loop on a
thread of its own over its source's batches, publishing weights to the param server every
``broadcast_interval`` updates.

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
from typing import Any, Iterator

import numpy as np

from rlmesh.runtime.import_path import SentCode, import_object, named_roots
from rlmesh.roles.learner import learner_class_of
from rlmesh.roles.learner_input import StreamSource, passes_per_update
from rlmesh.roles.learner_report import Report
from rlmesh.roles.learner_source import DirectSource, InputClosed, LearnerSource
from rlmesh.roles.replay_input import ReplaySource
from rlmesh.roles.weight_publisher import WeightPublisher
from rlmesh.runtime import Actor
from rlmesh.runtime.protocol import Protocol

log = logging.getLogger(__name__)


class LearnerActor(Actor):
    """One learner (rank ``rank`` of ``world_size``) of the policies in ``policy_specs``.

    Synchronous: ``update(batches, timesteps)``. Asynchronous, after ``start_async``:
    ``add_fragment`` (a stream from runners) joins fragments into train batches;
    ``add_batch`` (a stream from aggregators) takes batches they joined. After
    ``start_replay``: batches sampled from replay shards. The calls only one source serves
    are declared here and written in that source's module (``_source_call``).
    """

    protocol = Protocol(
        calls=("update", "apply_gradients", "start_async", "start_replay",
               "replay_shard_restarted", "add_fragment", "dp_listen", "set_dp_address",
               "publish", "pop_metrics", "num_updates", "updates_reported", "get_weights",
               "set_weights", "add_policy", "remove_policy", "get_state", "set_state"),
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
        # Where the batches come from: the driver's update calls until start_async or
        # start_replay gives the learner a source that feeds its update loop.
        self.source: LearnerSource = DirectSource()
        # How long a data-parallel collective waits for the other ranks.
        self._dp_timeout = float(getattr(cfg, "learner_queue_timeout", 300.0))
        self._ps_name = param_server
        self._lock = threading.Lock()  # the model: update thread vs. weights and state calls
        self._stop = threading.Event()
        self._error: str | None = None
        self.version = 0  # policy version: +1 per update and per set_weights/set_state
        self.publisher = WeightPublisher(None, rank)  # its param server: on_start (rank 0)
        self.publisher.on_idle = self._offer_owed
        self._owed: int | None = None  # a due version not snapshotted: the publisher was busy
        self._report = Report()
        # The update thread adds to the report while the driver's pop_metrics swaps it: an
        # update counts in exactly one report, and updates_reported says what the next holds.
        self._report_lock = threading.Lock()
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
        if self.rank == 0:
            self.publisher.ps = await self.job.get_actor(self._ps_name)
        # An update far longer than usual is reported by the supervisor (stuck_learner_warn_s).
        self.job.diagnostics.add_probe(f"learner-{self.rank}", self.learner.update_clock.probe)
        self._publishing = asyncio.ensure_future(self.publisher.run())

    async def on_stop(self) -> None:
        self._stop.set()
        self._publishing.cancel()
        self.source.stop()
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

    # --- asynchronous algorithms: a source that feeds the update loop ---

    def start_async(self) -> None:
        """Start the update loop over the batches streamed in (IMPALA, APPO):
        ``learner_input.StreamSource``."""
        if self._thread is None:
            self._start(StreamSource(self.config, self.rank, self.world_size, self._stop.is_set))

    async def start_replay(self, shards: list[str]) -> None:
        """Start the update loop over batches sampled from the replay shards named
        ``shards`` (APEX): ``replay_input.ReplaySource``."""
        if self._thread is None:
            self._start(await ReplaySource.open(self.job, self.config, shards,
                                                self._stop.is_set))

    def _start(self, source: LearnerSource) -> None:
        self.source = source
        self._thread = threading.Thread(target=self._run, name=f"rlmesh.learner-{self.rank}",
                                        daemon=True)
        self._thread.start()

    async def add_fragment(self, fragment: dict[str, Any]) -> None:
        """A runner's fragment (``StreamSource.add_fragment``)."""
        await self._source_call("add_fragment", "start_async", fragment)

    async def add_batch(self, batch: dict[str, Any]) -> None:
        """A train batch an aggregator joined (``StreamSource.add_batch``)."""
        await self._source_call("add_batch", "start_async", batch)

    def replay_shard_restarted(self, index: int) -> None:
        """The driver saw replay shard ``index`` restart (``ReplaySource``'s call of this
        name); before start_replay, there is nothing to give up on."""
        self._source_call("replay_shard_restarted", None, index)

    def _source_call(self, call: str, started_by: str | None, *args: Any) -> Any:
        """``call`` served by the source's method of that name: a call only one source serves
        is declared on this role but written with its source. A source without it refuses
        it, naming the call that starts the one that has it (``started_by``; None: ignored,
        as a tell about another source's peers)."""
        method = getattr(self.source, call, None)
        if method is not None:
            return method(*args)
        if started_by is not None:
            raise RuntimeError(f"this learner ({self.source.name} input) serves {call} only "
                               f"after {started_by}()")
        return None

    def _run(self) -> None:
        try:
            if not self._joined:
                self._join_group()
                self._joined = True
            while not self._stop.is_set():
                waited = time.perf_counter()
                batch, is_new = self.source.next(self.version, self._dp_timeout)
                started = time.perf_counter()
                self._update(batch, is_new)
                with self._report_lock:
                    self._report.wait_s += started - waited
                    self._report.busy_s += time.perf_counter() - started
        except InputClosed:
            return
        except Exception as exc:
            if not self._stop.is_set():
                # The cause in one line for the driver, which says it on the console; here,
                # for the log files only (``detail``), the same and the traceback.
                self._error = f"{type(exc).__name__}: {_first_line(exc)}"
                log.error("learner %d stopped: %s\n%s", self.rank, self._error,
                          traceback.format_exc().rstrip(), extra={"detail": True})

    def _update(self, batch: dict[str, Any], is_new: bool) -> None:
        lag = self.version - np.asarray(batch["policy_versions"])
        timesteps = self.source.timesteps()
        with self._lock:
            stats = self.learner.update_from_batch(batch["policies"], timesteps,
                                                   num_epochs=passes_per_update(self.config))
            self.version += 1
            # A snapshot only while none is waiting or on its way (it would wait behind
            # it): copying the weights every update cost APEX's small DQN ~6% of its updates.
            due = self.rank == 0 and self.version % self.config.broadcast_interval == 0
            snapshot = (self.version, self.learner.get_weights()) \
                if due and self.publisher.idle else None
            # Skipped while another was on its way: offered when that send ends, if no
            # update came since (the last version of a stream must not stay unpublished).
            self._owed = self.version if due and snapshot is None else None
            if self.world_size > 1:
                self._digests.append((self.learner.num_updates, self._digest()))
        self.source.trained(batch, stats)  # (its own statistics out first: APEX's TD errors)
        with self._report_lock:
            self._report.add(stats, lag, int(batch["env_steps"]) if is_new else 0)
        if snapshot is not None:
            self._loop.call_soon_threadsafe(self.publisher.offer, snapshot)
        elif self._owed is not None:  # the send may have ended while the lock was held
            self._loop.call_soon_threadsafe(self._offer_owed)

    def _offer_owed(self) -> None:
        """The publisher is idle again: the due version skipped meanwhile, if the model is
        still at it (an update running now, or since, takes its own decision)."""
        if self._owed is None or self._owed != self.version or not self.publisher.idle:
            return  # (not idle: this runs again when that send ends)
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self._owed == self.version:
                self._owed = None
                self.publisher.offer((self.version, self.learner.get_weights()))
        finally:
            self._lock.release()

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

    # --- publishing: one sender (``weight_publisher.py``), so versions arrive in order ---

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
            await self.publisher.send(version, weights)
            self.version = max(self.version, version)
            return version
        with self._lock:
            self.version += 1
            snapshot = (self.version, self.learner.get_weights())
        return await self.publisher.publish(snapshot)

    # --- the driver's calls ---

    def pop_metrics(self) -> dict[str, Any]:
        """What happened since the last call; raises the update thread's error, if any."""
        if self._error is not None:
            raise LearnerStopped(f"learner {self.rank} stopped: {self._error}")
        with self._report_lock:
            report, self._report = self._report, Report()
        return {**report.summary(), **self.source.metrics(), "rank": self.rank,
                "policy_version": self.version,
                "num_weights_published": self.publisher.num_published}

    def num_updates(self) -> int:
        if self._error is not None:
            raise LearnerStopped(f"learner {self.rank} stopped: {self._error}")
        return self.learner.num_updates

    def updates_reported(self) -> int:
        """Updates the next ``pop_metrics`` will report (with their statistics and env
        steps). ``num_updates`` counts an update as its gradient step ends, before its
        statistics reach the report: an iteration that waited on it could read none."""
        if self._error is not None:
            raise LearnerStopped(f"learner {self.rank} stopped: {self._error}")
        with self._report_lock:
            return self._report.updates

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


class LearnerStopped(RuntimeError):
    """The update loop raised; the message is its cause in one line (the traceback is in
    the learner's log)."""


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0]


"""What feeds a learner from replay shards (APEX): ``ReplayInput`` keeps sample requests in
flight on each shard's credits, queues the batches that come back for the update thread and
routes each batch's TD errors back to the shard it came from, as priorities; plain code,
tested without sockets. ``ReplayFeeder`` is its socket shell on the learner's event loop;
``ReplaySource`` the two as the learner actor's replay source (``learner_source.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import queue
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from rlmesh.rl.columns import DEFAULT_POLICY_ID
from rlmesh.roles.learner_input import batch_size_per_learner
from rlmesh.roles.learner_source import POLL_S, InputClosed

if TYPE_CHECKING:
    from rlmesh.config.base import AlgorithmConfig

log = logging.getLogger(__name__)

#: A shard that had nothing to give is asked again after the first delay when it served
#: before (the learner is ahead of training_intensity: runners catch up within
#: milliseconds), else after a delay doubling up to the last (it is still warming up: not
#: asked a thousand times a second).
RETRY_S = (0.002, 0.05)
#: Doublings that take the first delay past the last: the exponent stops there (2 ** n
#: overflows a float past n ~1,024: a shard warming up for ~26 s used to raise).
MAX_DOUBLINGS = math.ceil(math.log2(RETRY_S[1] / RETRY_S[0]))


class ReplayFeedFailed(RuntimeError):
    """Requesting or reading a shard's samples failed in the learner itself (not a shard
    that died: that is retried): the update thread raises it, so the run ends with it."""


@dataclass
class Priorities:
    """New priorities for the items a batch sampled from shard ``shard``, as it was then
    (``incarnation``)."""

    shard: int
    batch_indexes: np.ndarray
    td_errors: np.ndarray
    incarnation: str


class ReplayInput:
    """The batches a replay-fed learner trains on, one per update, from ``num_shards``
    shards. Remote shards are asked on credit: at most ``credits`` sample requests per
    shard are in flight or queued untrained; a credit comes back when the update thread
    takes that shard's batch. A single shard served in the learner's own process
    (``local``: its ``ShardBuffer``) is sampled by the update thread itself, no request.

    ``beta(env_steps)``: prioritized replay's importance exponent at that many env steps
    (the shards' counts summed over restarts: also what the learner's schedules read)."""

    def __init__(self, num_shards: int, *, credits: int, batch_size: int,
                 beta: Callable[[int], float], prioritized: bool, local: Any = None,
                 on_credit: Callable[[], None] = lambda: None,
                 stopped: Callable[[], bool] = lambda: False) -> None:
        if local is not None and num_shards != 1:
            raise ValueError("a local shard is the run's only one")
        self.num_shards, self.batch_size = num_shards, batch_size
        self.beta, self.prioritized, self.local = beta, prioritized, local
        self.on_credit, self.stopped = on_credit, stopped
        self._credits = [0 if local is not None else credits] * num_shards
        self._batches: queue.Queue[dict[str, Any]] = queue.Queue()
        self._lock = threading.Lock()  # credits and steps: the loop vs. the update thread
        # Each shard's newest incarnation and its env steps there; the former lives' steps.
        self.incarnations: list[str | None] = [None] * num_shards
        self._retired: set[str] = set()  # incarnations of shards since restarted
        self._steps = [0] * num_shards
        self._steps_before = 0
        self._refusals = [0] * num_shards  # in a row, for the retry delay
        self._served = [False] * num_shards  # a batch since the shard (re)started
        self.error: str | None = None  # set by ``fail``: ``next`` raises it
        self.counters = {"num_replay_batches": 0, "num_sample_refusals": 0,
                         "max_sample_refusals_in_a_row": 0,
                         "num_sample_errors": 0, "num_priority_updates_sent": 0,
                         "num_stale_priority_updates_dropped": 0}

    # --- the event loop's side (remote shards) ---

    def requests(self) -> list[int]:
        """The shards to send a sample request to now, one entry per credit taken."""
        with self._lock:
            out = [j for j in range(self.num_shards) for _ in range(self._credits[j])]
            self._credits = [0] * self.num_shards
        return out

    def sampled(self, shard: int, got: dict[str, Any] | None) -> float | None:
        """Shard ``shard``'s reply: its batch, queued for the update thread (None back), or
        (it had none: not enough stored yet, or training_intensity reached) the seconds to
        wait before ``credit_back``, which lets the shard be asked again."""
        if got is None:
            return self._refused(shard)
        self._seen(shard, got)
        self._batches.put(got)
        return None

    def _refused(self, shard: int) -> float:
        self.counters["num_sample_refusals"] += 1
        self._refusals[shard] += 1
        self.counters["max_sample_refusals_in_a_row"] = max(
            self.counters["max_sample_refusals_in_a_row"], self._refusals[shard])
        if self._served[shard]:
            return RETRY_S[0]
        doublings = min(self._refusals[shard] - 1, MAX_DOUBLINGS)
        return min(RETRY_S[1], RETRY_S[0] * 2.0 ** doublings)

    def fail(self, why: str) -> None:
        """The learner's side of the feed broke (``why``, one line): the update thread
        raises ``ReplayFeedFailed`` at its next batch instead of waiting for ever."""
        if self.error is None:
            self.error = why

    def failed(self, shard: int) -> float:
        """A request that got no reply (the shard died or is restarting): the seconds to
        wait before ``credit_back``."""
        self.counters["num_sample_errors"] += 1
        return RETRY_S[1]

    def credit_back(self, shard: int) -> None:
        with self._lock:
            self._credits[shard] += 1

    def restarted(self, shard: int) -> None:
        """Shard ``shard`` came back empty: priorities of the batches sampled from its
        former life are dropped here instead of sent."""
        with self._lock:
            if self.incarnations[shard] is not None:
                self._retired.add(self.incarnations[shard])
            self._served[shard], self._refusals[shard] = False, 0  # empty: warming up

    def _seen(self, shard: int, got: dict[str, Any]) -> None:
        self._refusals[shard], self._served[shard] = 0, True
        with self._lock:
            if got["incarnation"] != self.incarnations[shard]:
                if self.incarnations[shard] is not None:  # a new life counts from 0
                    self._steps_before += self._steps[shard]
                    self._steps[shard] = 0
                self.incarnations[shard] = got["incarnation"]
            self._steps[shard] = max(self._steps[shard], int(got.get("num_env_steps", 0)))

    @property
    def env_steps(self) -> int:
        """Env steps the shards took in, over their restarts (as far as their replies said)."""
        with self._lock:
            return self._steps_before + sum(self._steps)

    def qsize(self) -> int:
        return self._batches.qsize()

    # --- the update thread's side ---

    def next(self, version: int, timeout: float) -> tuple[dict[str, Any], bool]:
        """The batch for the next update (``LearnerInput.next``'s contract): one shard's
        sample as a ``[1, B]`` train batch of the default policy. Waits as long as the shards
        have nothing to give (before learning starts); InputClosed once stopped."""
        while True:
            if self.error is not None:
                raise ReplayFeedFailed(self.error)
            if self.stopped():
                raise InputClosed
            got = self._take() if self.local is None else self._sample_local()
            if got is not None:
                self.counters["num_replay_batches"] += 1
                return _train_batch(got), True

    def _take(self) -> dict[str, Any] | None:
        try:
            got = self._batches.get(timeout=POLL_S)
        except queue.Empty:
            return None
        self.credit_back(got["shard"])
        self.on_credit()
        return got

    def _sample_local(self) -> dict[str, Any] | None:
        got = self.local.sample(self.batch_size, self.beta(self.env_steps))
        if got is None:
            time.sleep(self._refused(0))
            return None
        self._seen(0, got)
        return got

    def trained(self, batch: dict[str, Any], td_errors: Any) -> Priorities | None:
        """A batch was trained on: its TD errors as new priorities of the items sampled.
        Set here for a local shard; for a remote one, what to send it (None: nothing, as
        without prioritized replay, or the shard restarted since: stale, dropped)."""
        if not self.prioritized or td_errors is None:
            return None
        shard, idx, incarnation = batch["replay"]
        with self._lock:
            stale = incarnation != self.incarnations[shard] or incarnation in self._retired
        if stale:
            self.counters["num_stale_priority_updates_dropped"] += 1
            return None
        td = np.asarray(td_errors, np.float64).reshape(-1)
        if self.local is not None:
            self.local.update_priorities(idx, td, incarnation)
            return None
        self.counters["num_priority_updates_sent"] += 1
        return Priorities(shard, idx, td, incarnation)


def _train_batch(got: dict[str, Any]) -> dict[str, Any]:
    """A shard's sample as the learner's train batch: ``[K=1, B, ...]`` columns, no policy
    versions (replayed transitions are off-policy by design), no new env steps."""
    cols = dict(got["columns"])
    idx = np.asarray(cols.pop("batch_indexes"))
    return {"policies": {DEFAULT_POLICY_ID: {k: np.asarray(v)[None] for k, v in cols.items()}},
            "policy_versions": np.zeros(0, np.int64), "env_steps": 0,
            "replay": (int(got["shard"]), idx, got["incarnation"])}


class ReplayFeeder:
    """``ReplayInput``'s socket shell on the learner's event loop: a sample request per
    credit to each remote shard (``handles``, by shard index; None for a local one), and
    the priorities ``ReplayInput.trained`` routes, told to their shard."""

    def __init__(self, replay: ReplayInput, handles: list[Any], timeout: float = 30.0) -> None:
        self.replay, self.handles, self.timeout = replay, handles, timeout
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._main = self._loop.create_task(self._run(), name="the replay sample requests")
        self._main.add_done_callback(self._check)

    def wake(self) -> None:
        """A credit came back (from any thread): send the requests it allows."""
        self._loop.call_soon_threadsafe(self._wake.set)

    async def _run(self) -> None:
        while True:
            for j in self.replay.requests():
                self._spawn(self._sample(j), f"sampling {self.handles[j].name}")
            await self._wake.wait()
            self._wake.clear()

    def _spawn(self, coro: Any, name: str) -> None:
        task = self._loop.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(self._check)

    def _check(self, task: asyncio.Task[Any]) -> None:
        """A task that raised: its credit is gone with it (the learner would wait for
        batches for ever, as it did when the retry delay overflowed), so the feed fails,
        logged with the traceback, and the update thread ends the run with the cause."""
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        why = f"{task.get_name()} failed in the learner: {type(exc).__name__}: {exc}"
        log.error("%s", why, exc_info=(type(exc), exc, exc.__traceback__),
                  extra={"detail": True})  # the console: the driver's one line
        self.replay.fail(why)

    async def _sample(self, j: int) -> None:
        handle = self.handles[j]
        size, beta = self.replay.batch_size, self.replay.beta(self.replay.env_steps)
        try:
            got = await handle.call("sample", size, beta, timeout=self.timeout)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the shard died or restarts: ask it again shortly
            log.debug("sampling %s failed: %s", handle.name, exc)
            delay = self.replay.failed(j)
        else:
            delay = self.replay.sampled(j, got)
        if delay is not None:  # no batch: the credit back after the delay
            await asyncio.sleep(delay)
            self.replay.credit_back(j)
            self._wake.set()

    def send(self, priorities: Priorities) -> None:
        """Tell the shard the new priorities (on the loop; from the update thread through
        ``call_soon_threadsafe``)."""
        self._spawn(self._tell(priorities), f"priorities to {self.handles[priorities.shard].name}")

    async def _tell(self, p: Priorities) -> None:
        handle = self.handles[p.shard]
        try:
            await handle.tell("update_priorities", p.batch_indexes, p.td_errors, p.incarnation)
        except Exception as exc:  # the shard is restarting: its items are gone anyway
            log.debug("priorities for %s lost: %s", handle.name, exc)

    def restarted(self, j: int) -> None:
        """Shard ``j`` restarted: requests it will never answer fail now (their credits
        come back), and priorities for its former life are dropped."""
        self.replay.restarted(j)
        handle = self.handles[j]
        if handle is not None:
            handle.mark_dead("restarted")  # not permanent: the handle reaches the new one

    def stop(self) -> None:
        self._main.cancel()
        for task in list(self._tasks):
            task.cancel()



class ReplaySource:
    """Batches sampled from replay shards (APEX; the learner's ``start_replay``): a
    ``ReplayInput`` fed by its ``ReplayFeeder`` on the learner's event loop; each batch's TD
    errors go back to its shard as the new priorities."""

    name = "replay"

    def __init__(self, replay: ReplayInput, feeder: ReplayFeeder) -> None:
        self.replay, self.feeder = replay, feeder
        self._loop = asyncio.get_running_loop()

    @classmethod
    async def open(cls, job: Any, cfg: AlgorithmConfig, shards: list[str],
                   stopped: Callable[[], bool]) -> ReplaySource:
        """The source over the shards named ``shards`` (by index): ``replay_sample_requests_
        in_flight`` sample requests kept outstanding per shard. The only shard, served in
        this process (the driver's), is sampled directly."""
        local = None
        if len(shards) == 1:
            with contextlib.suppress(KeyError, AttributeError):
                local = job.local_actor(shards[0]).core
        handles = [None] if local is not None else [await job.get_actor(n) for n in shards]
        replay = ReplayInput(
            len(shards), credits=cfg.replay_sample_requests_in_flight,
            batch_size=batch_size_per_learner(cfg), beta=cfg.replay_beta,
            prioritized=cfg.prioritized_replay, local=local, stopped=stopped)
        feeder = ReplayFeeder(replay, handles)
        replay.on_credit = feeder.wake
        return cls(replay, feeder)

    def replay_shard_restarted(self, index: int) -> None:
        """The learner's call of that name: shard ``index`` restarted, so its former life's
        requests and priorities are given up on."""
        self.feeder.restarted(index)

    def next(self, version: int, timeout: float) -> tuple[dict[str, Any], bool]:
        # (APEX's config has no learner_queue_timeout: the input waits for the shards.)
        return self.replay.next(version, timeout)

    def timesteps(self) -> int:
        return self.replay.env_steps  # what the shards took in

    def trained(self, batch: dict[str, Any], stats: dict[str, dict[str, Any]]) -> None:
        """Its TD errors (out of the statistics) to its shard, as the new priorities."""
        td = stats.get(DEFAULT_POLICY_ID, {}).pop("td_error", None)
        route = self.replay.trained(batch, td)
        if route is not None:
            self._loop.call_soon_threadsafe(self.feeder.send, route)

    def metrics(self) -> dict[str, Any]:
        return {**self.replay.counters, "learner_queue_size": self.replay.qsize(),
                "num_replay_env_steps": self.replay.env_steps}

    def stop(self) -> None:
        self.feeder.stop()

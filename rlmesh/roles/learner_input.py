"""What feeds an asynchronous learner: fragments joined into train batches, a bounded queue
between the event loop and the update thread, replay mixing and the minibatch buffer.

Plain code, no sockets: the aggregator uses ``BatchBuilder``; ``StreamSource`` puts them
together as the learner actor's stream source (``learner_source.py``: IMPALA, APPO).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import time
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from rlmesh.rl.columns import DEFAULT_POLICY_ID, merge_by_policy, time_major_keys
from rlmesh.roles.learner_source import POLL_S, InputClosed

if TYPE_CHECKING:
    from rlmesh.config.base import AlgorithmConfig

log = logging.getLogger(__name__)


def batch_size_per_learner(cfg: AlgorithmConfig) -> int:
    """The env steps of one learner's train batch (its share of ``train_batch_size``)."""
    if cfg.train_batch_size_per_learner is not None:
        return cfg.train_batch_size_per_learner
    return -(-cfg.train_batch_size // max(1, cfg.num_learners))


def passes_per_update(cfg: AlgorithmConfig) -> int:
    """The passes over its batch each update makes: ``num_epochs`` with
    ``epochs_in_update``; otherwise 1, ``LearnerInput`` replaying the batch a pass an update
    (RLlib's way; every config without the setting: APEX's replay)."""
    return cfg.num_epochs if getattr(cfg, "epochs_in_update", False) else 1


class LearnerQueueTimeout(RuntimeError):
    """No train batch reached the learner within ``learner_queue_timeout``."""


class BatchBuilder:
    """Joins fragments until they hold ``batch_size`` env steps, then hands out the batch:
    ``policies``, each policy's time-major columns side by side (``merge_by_policy``), plus
    ``policy_versions`` (one per fragment: the version it was sampled with) and ``env_steps``.

    A fragment that is not one (junk on the stream) is refused with a ValueError before it
    can spoil the batch; a batch that still cannot be joined is dropped. Both are counted."""

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size
        self._fragments: list[dict[str, Any]] = []
        self._steps = 0
        # Each policy's column layout: {policy_id: {column: (dtype, shape)}}.
        self._layout: dict[str, dict[str, tuple[Any, tuple[int, ...]]]] | None = None
        self.counters = {"num_fragments_lost": 0, "num_batches_lost": 0}

    def add(self, fragment: dict[str, Any]) -> dict[str, Any] | None:
        try:
            steps = self._check(fragment)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            self.counters["num_fragments_lost"] += 1
            raise ValueError(f"not a fragment, refused: {exc}") from None
        if not steps:
            return None
        self._fragments.append(fragment)
        self._steps += steps
        if self._steps < self.batch_size:
            return None
        fragments, self._fragments, steps, self._steps = self._fragments, [], self._steps, 0
        try:
            return {"policies": merge_by_policy(fragments),
                    "policy_versions": np.array([f["policy_version"] for f in fragments], np.int64),
                    "env_steps": steps}
        except (ValueError, TypeError, KeyError) as exc:
            self.counters["num_batches_lost"] += 1
            self.counters["num_fragments_lost"] += len(fragments)
            self._layout = None
            log.warning("a train batch of %d fragments could not be joined and is dropped: %s",
                        len(fragments), exc)
            return None

    def _check(self, fragment: dict[str, Any]) -> int:
        """The fragment's env steps, or an error naming what makes it no fragment: columns
        not ``[T, B, ...]`` arrays alike, or unlike the fragments before it."""
        steps, version = fragment["env_steps"], fragment["policy_version"]
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
            raise ValueError(f"env_steps {steps!r} is not a count")
        if isinstance(version, bool) or not isinstance(version, (int, np.integer)):
            raise ValueError(f"policy_version {version!r} is not an integer")
        if not steps:
            return 0  # nothing to train on (a policy server's idle fragment): ignored
        if "policy_batches" in fragment:  # multi-agent: each policy's part checked alone
            for pid, part in fragment["policy_batches"].items():
                self._check_columns(part, int(part["env_steps"]), str(pid))
            return int(steps)
        self._check_columns(fragment, steps, fragment.get("policy_id", DEFAULT_POLICY_ID))
        return int(steps)

    def _check_columns(self, fragment: dict[str, Any], steps: int, pid: str) -> None:
        cols = {k: fragment[k] for k in time_major_keys(fragment)}
        obs = cols.get("obs")
        if not isinstance(obs, np.ndarray) or obs.ndim < 2:
            raise ValueError("no obs column of shape [T, B, ...]")
        layout = {}
        for key, col in cols.items():
            # "O": a policy's extra outputs of other plain data (strings), one per step.
            if (not isinstance(col, np.ndarray) or col.dtype.kind not in "biufO"
                    or col.shape[:2] != obs.shape[:2]):
                raise ValueError(f"column {key!r} is not numbers of shape {obs.shape[:2]} + ...")
            layout[key] = (col.dtype, col.shape[2:])
        if "mask" not in cols or int(np.count_nonzero(cols["mask"])) != steps:
            raise ValueError(f"its mask does not hold env_steps={steps} steps")
        known = (self._layout or {}).get(pid)
        if known is not None and layout != known:
            raise ValueError(f"its columns {sorted(layout)} differ from those of the "
                             "fragments before it")
        self._layout = {**(self._layout or {}), pid: layout}

    @property
    def pending_steps(self) -> int:
        return self._steps


class BatchQueue:
    """A queue from the event loop (``await put``) to a thread (``get``), bounded: ``put``
    waits while ``maxsize`` items are queued, so a stream's credit is returned only once its
    item has room, and senders slow down to the learner's pace."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._items: queue.Queue[Any] = queue.Queue()
        self._room: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def put(self, item: Any) -> None:
        await self._semaphore().acquire()
        self._items.put(item)

    async def room(self) -> None:
        """Returns once an item would be queued at once (fewer than ``maxsize`` queued),
        taking nothing: a single caller's next ``put`` then does not wait."""
        room = self._semaphore()
        await room.acquire()
        room.release()

    def _semaphore(self) -> asyncio.Semaphore:
        if self._room is None:
            self._loop = asyncio.get_running_loop()
            self._room = asyncio.Semaphore(self.maxsize)
        return self._room

    def get(self, timeout: float) -> Any:
        """The oldest item; ``queue.Empty`` after ``timeout`` seconds without one."""
        item = self._items.get(timeout=timeout)
        assert self._loop is not None and self._room is not None
        self._loop.call_soon_threadsafe(self._room.release)
        return item

    def qsize(self) -> int:
        return self._items.qsize()


class LearnerInput:
    """The batches a learner trains on, one per update: new ones from ``take`` (a callable
    returning the next queued batch), each replayed ``num_passes`` times from a buffer of
    ``buffer_size`` (RLlib's minibatch buffer, cycled so consecutive updates see different
    batches), with ``replay_proportion`` older batches from ``replay_slots`` mixed in per new
    one, and batches older than ``max_policy_lag`` versions dropped."""

    def __init__(self, take: Callable[[float], Any], *, buffer_size: int = 1, num_passes: int = 1,
                 replay_proportion: float = 0.0, replay_slots: int = 0,
                 max_policy_lag: int | None = None, seed: int | None = None) -> None:
        self.take = take
        self.num_passes = num_passes
        self.replay_proportion = replay_proportion
        self.max_policy_lag = max_policy_lag
        self._buffer: list[Any] = [None] * buffer_size
        self._passes_left = [0] * buffer_size
        self._slot = 0
        self._replay: list[Any] = []
        self._replay_slots = replay_slots
        self._replay_next = 0
        self._owed = 0.0  # replayed batches due, fractional
        self._rng = np.random.default_rng(seed)
        self.counters = {"num_batches_new": 0, "num_batches_replayed": 0,
                         "num_batches_dropped_stale": 0}

    def next(self, version: int, timeout: float) -> tuple[Any, bool]:
        """The batch for the next update, and whether it is new (first pass, not replayed).
        ``version`` is the learner's policy version now; LearnerQueueTimeout if no new batch
        comes within ``timeout`` seconds when one is needed."""
        slot = self._slot
        self._slot = (slot + 1) % len(self._buffer)
        fresh = self._passes_left[slot] <= 0
        if fresh:
            self._buffer[slot] = self._next_batch(version, timeout)
            self._passes_left[slot] = self.num_passes
        self._passes_left[slot] -= 1
        batch, is_new = self._buffer[slot]
        return batch, fresh and is_new

    def _next_batch(self, version: int, timeout: float) -> tuple[Any, bool]:
        if self._owed >= 1 and self._replay:
            self._owed -= 1
            self.counters["num_batches_replayed"] += 1
            return self._replay[int(self._rng.integers(len(self._replay)))], False
        batch = self._take_fresh(version, timeout)
        self.counters["num_batches_new"] += 1
        if self._replay_slots:
            if len(self._replay) < self._replay_slots:
                self._replay.append(batch)
            else:
                self._replay[self._replay_next] = batch
            self._replay_next = (self._replay_next + 1) % self._replay_slots
            self._owed += self.replay_proportion
        return batch, True

    def _take_fresh(self, version: int, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LearnerQueueTimeout(
                    f"no train batch reached the learner within learner_queue_timeout={timeout} s: "
                    "the env runners (or aggregators) delivered nothing in that time. Check that "
                    "they are alive and sampling (rlmesh stack), or raise learner_queue_timeout")
            try:
                batch = self.take(left)
            except queue.Empty:
                continue
            lag = version - int(np.min(batch["policy_versions"]))
            if self.max_policy_lag is not None and lag > self.max_policy_lag:
                self.counters["num_batches_dropped_stale"] += 1
                continue
            return batch



class StreamSource:
    """A stream's batches (IMPALA, APPO; the learner's ``start_async``): runners' fragments
    (``add_fragment``), joined here into train batches, or batches aggregators joined
    (``add_batch``), queued for the update thread, which takes them through ``LearnerInput``
    (minibatch buffer, replay mixing, stale batches dropped). Rank ``rank`` of ``world_size``
    learners; ``stopped``: whether the learner is stopping."""

    name = "stream"

    def __init__(self, cfg: AlgorithmConfig, rank: int = 0, world_size: int = 1,
                 stopped: Callable[[], bool] = lambda: False) -> None:
        self.queue = BatchQueue(cfg.learner_queue_size)
        self.input = LearnerInput(
            self._take, buffer_size=cfg.minibatch_buffer_size,
            num_passes=cfg.num_epochs // passes_per_update(cfg),  # those updates do not make
            replay_proportion=cfg.replay_proportion, replay_slots=cfg.replay_buffer_num_slots,
            max_policy_lag=cfg.max_policy_lag,
            seed=None if cfg.seed is None else cfg.seed + 7 * rank)
        self.builder = BatchBuilder(batch_size_per_learner(cfg))
        self._gate = asyncio.Lock()  # the fragments join the builder one at a time
        self.world_size, self.stopped = world_size, stopped
        self._received_steps = 0

    # --- the event loop's side: the stream calls ---

    async def add_fragment(self, fragment: dict[str, Any]) -> None:
        """A runner's fragment; a train batch goes to the queue once enough have come.

        While the queue is full no fragment joins the next batch: every runner's call
        waits (its credit held), not only the one whose fragment completed a batch. Else
        the others would go on filling one more batch behind it, and each batch would be
        trained two to three updates after the policy that sampled it was published
        (APPO's CartPole defaults: a policy lag of 3.4 updates with a queue of one; about
        1 now, as the queue's size says)."""
        async with self._gate:
            await self.queue.room()
            batch = self.builder.add(fragment)  # junk: a ValueError back to its sender, counted
            self._received_steps += int(fragment["env_steps"])
            if batch is not None:
                await self.queue.put(batch)  # there is room: at once

    async def add_batch(self, batch: dict[str, Any]) -> None:
        """A train batch an aggregator joined (see ``BatchBuilder``)."""
        self._received_steps += int(batch["env_steps"])
        await self.queue.put(batch)

    # --- the update thread's side ---

    def _take(self, timeout: float) -> dict[str, Any]:
        if self.stopped():
            raise InputClosed
        return self.queue.get(min(timeout, POLL_S))

    def next(self, version: int, timeout: float) -> tuple[dict[str, Any], bool]:
        return self.input.next(version, timeout)

    def timesteps(self) -> int:
        """The fragments' env steps received, times the ranks (each gets its share)."""
        return self._received_steps * self.world_size

    def trained(self, batch: dict[str, Any], stats: dict[str, dict[str, Any]]) -> None:
        pass  # nothing goes back up a stream

    def metrics(self) -> dict[str, Any]:
        return {**self.input.counters, **self.builder.counters,
                "learner_queue_size": self.queue.qsize(),
                "pending_env_steps": self.builder.pending_steps}

    def stop(self) -> None:
        pass  # the update thread sees ``stopped`` within POLL_S

"""The replay shard: one slice of a sharded replay buffer (APEX). ``ShardBuffer`` is the slice
itself, a plain class: runners' fragments in (their n-step transitions stored), batches out,
the TD errors back as the sampled items' priorities. ``ReplayShard`` serves one over sockets,
in a process of its own, or in the driver's (one shard: a learner there samples it directly).

Backpressure: ``add_fragment`` is a stream method that returns (and so gives the runner its
credit back) only once the transitions are stored and, with ``training_intensity``, only
while the learner keeps up (samples served >= intensity x env steps taken, past the warm-up);
``sample`` serves the learner only while it does not run ahead of that; the learner keeps a
bounded number of ``sample`` calls in flight per shard (``roles/replay_input.py``). A
restarted shard starts empty under a new ``incarnation``; priorities meant for its former
life are dropped and counted.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import threading
from typing import Any

import numpy as np

from rlmesh.env.registry import space_from_data
from rlmesh.roles.specs import ShardSpec
from rlmesh.rl.nstep import NStepBuilder
from rlmesh.rl.replay import PrioritizedReplayBuffer, ReplayBuffer, transition_columns
from rlmesh.runtime import Actor
from rlmesh.runtime.protocol import Protocol

# How long a sample request waits for the runners while the learner is ahead of
# training_intensity before it is answered with None (the learner then asks again).
SAMPLE_WAIT_S = 0.1


def shard_capacity(capacity: int, num_shards: int) -> int:
    """Transitions one of ``num_shards`` shards holds (the capacity split evenly, as RLlib)."""
    return max(1, int(capacity) // max(1, int(num_shards)))


def shard_learning_starts(learning_starts: int, num_shards: int) -> int:
    """Transitions one of ``num_shards`` shards holds before it serves the learner: its
    share of ``num_steps_sampled_before_learning_starts``, rounded up."""
    return max(1, -(-int(learning_starts) // max(1, int(num_shards))))


class ShardBuffer:
    """Shard ``index`` of ``num_replay_buffer_shards``: a (prioritized) buffer of
    ``capacity / num_shards`` transitions and the n-step builder of the runners feeding it.
    Its methods may be called from two threads (the driver's loop storing, its learner
    thread sampling, with one local shard): ``lock`` keeps the buffer whole."""

    def __init__(self, cfg: Any, obs_space: Any, action_space: Any, index: int = 0) -> None:
        rb = cfg.replay_settings()
        shards = cfg.num_replay_buffer_shards
        capacity = shard_capacity(rb["capacity"], shards)
        specs = transition_columns(obs_space, action_space)
        seed = None if cfg.seed is None else cfg.seed + 1000 * (index + 1)
        if cfg.prioritized_replay:
            self.buffer: ReplayBuffer = PrioritizedReplayBuffer(
                capacity, specs, rb["prioritized_replay_alpha"], rb["prioritized_replay_eps"],
                seed=seed)
        else:
            self.buffer = ReplayBuffer(capacity, specs, seed=seed)
        # Worker-side prioritization: runners ship their Q-values, new transitions get
        # their TD error as priority instead of the highest so far.
        self.worker_side = bool(rb.get("worker_side_prioritization")) and cfg.prioritized_replay
        self.nstep = NStepBuilder(cfg.n_step, cfg.gamma, runner_q=self.worker_side)
        self.index = index
        # Sampling waits for this shard's share of the steps before learning starts.
        self.min_size = shard_learning_starts(cfg.num_steps_sampled_before_learning_starts,
                                              shards)
        self.intensity = cfg.training_intensity
        # How far the runners may run ahead of the learner before add_fragment waits.
        self.slack = cfg.train_batch_size * cfg.replay_sample_requests_in_flight
        self.fragment_steps = 0  # the most env steps a fragment brought
        self.incarnation = secrets.token_hex(4)  # new after a restart: old indexes mean nothing
        self.lock = threading.Lock()
        self.counters = {"num_fragments": 0, "num_env_steps": 0, "num_samples": 0,
                         "num_sample_calls": 0, "num_priority_updates": 0,
                         "num_stale_priority_updates": 0, "wait_for_learner_s": 0.0,
                         "num_runner_priorities": 0}

    def learner_behind(self) -> bool:
        """With training_intensity: this shard's env steps past its warm-up, times the
        intensity, exceed the samples the learner drew from it (by more than its credits'
        worth): the runners wait for the learner instead of sampling on."""
        if self.intensity is None or len(self.buffer) < self.min_size:
            return False
        ahead = self.counters["num_env_steps"] - self.min_size
        return ahead * self.intensity > self.counters["num_samples"] + self.slack

    def warm(self) -> bool:
        """The shard holds its share of ``num_steps_sampled_before_learning_starts``."""
        return len(self.buffer) >= self.min_size

    def learner_ahead(self, num_items: int) -> bool:
        """With training_intensity: serving ``num_items`` more samples would take the
        learner past the intensity times this shard's env steps past its warm-up, by more
        than its credits' and a fragment's worth (the runners' steps on their way in count,
        as the steps sampled do: without them, measured, the two sides stuttered and APEX
        with one shard lost 15% of its updates). Never together with ``learner_behind``
        (their margins do not overlap), so neither side waits for the other for ever."""
        if self.intensity is None:
            return False
        steps = self.counters["num_env_steps"] - self.min_size + self.fragment_steps
        return self.counters["num_samples"] + num_items > steps * self.intensity + self.slack

    def store(self, fragment: dict[str, Any]) -> int:
        """The fragment's n-step transitions into the buffer; how many."""
        steps = int(fragment["env_steps"])
        with self.lock:
            transitions = self.nstep.add_fragment(fragment) if steps else {}
            self.counters["num_fragments"] += 1
            self.counters["num_env_steps"] += steps
            self.fragment_steps = max(self.fragment_steps, steps)
            if not transitions:
                return 0
            td = transitions.pop("td_error", None)
            if td is not None and isinstance(self.buffer, PrioritizedReplayBuffer):
                known = np.isfinite(td)  # unknown: the highest priority so far, as without
                self.counters["num_runner_priorities"] += int(known.sum())
                self.buffer.add(transitions, np.where(known, np.abs(td), self.buffer.max_priority))
            else:
                self.buffer.add(transitions)
            return len(transitions["rewards"])

    def sample(self, num_items: int, beta: float = 0.4) -> dict[str, Any] | None:
        """``num_items`` transitions (with ``weights``, ``batch_indexes`` and this shard's
        ``incarnation`` and env steps taken in), or None while the shard holds fewer than
        its share of ``num_steps_sampled_before_learning_starts``, or while the learner is
        ahead of ``training_intensity`` (``learner_ahead``)."""
        with self.lock:
            self.counters["num_sample_calls"] += 1
            if len(self.buffer) < self.min_size or self.learner_ahead(int(num_items)):
                return None
            out = self.buffer.sample(int(num_items), beta=float(beta))
            self.counters["num_samples"] += int(num_items)
            num_added, steps = self.buffer.num_added, self.counters["num_env_steps"]
        if "weights" not in out:
            out["weights"] = np.ones(int(num_items), np.float32)
        return {"columns": out, "incarnation": self.incarnation, "shard": self.index,
                "num_added": num_added, "num_env_steps": steps}

    def update_priorities(self, batch_indexes: np.ndarray, td_errors: np.ndarray,
                          incarnation: str) -> int:
        """The learner's TD errors as new priorities of the items sampled from this shard
        (NaN entries, steps the learner skipped, keep theirs); dropped when the items were
        sampled from this shard before it restarted. How many were set."""
        if incarnation != self.incarnation:
            self.counters["num_stale_priority_updates"] += 1
            return 0
        td = np.asarray(td_errors, np.float64).reshape(-1)
        idx = np.asarray(batch_indexes, np.int64).reshape(-1)
        with self.lock:
            ok = np.isfinite(td) & (idx >= 0) & (idx < len(self.buffer))
            if ok.any():
                self.buffer.update_priorities(idx[ok], td[ok])
            self.counters["num_priority_updates"] += 1
        return int(ok.sum())

    def stats(self) -> dict[str, Any]:
        """Counters since this shard started, and its buffer's state."""
        with self.lock:
            return {**self.counters, **self.nstep.counters, "index": self.index,
                    "incarnation": self.incarnation, "num_added": self.buffer.num_added,
                    "size": len(self.buffer), "size_bytes": self.buffer.size_bytes}

    # --- checkpoints (store_buffer_in_checkpoints, one local shard) ---

    def get_state(self) -> dict[str, Any]:
        """The buffer's contents, copied (the loop may store on while they are written)."""
        with self.lock:
            state = self.buffer.get_state()
            return {k: ({c: a.copy() for c, a in v.items()} if k == "columns" else np.copy(v))
                    for k, v in state.items()}

    def set_state(self, state: dict[str, Any]) -> None:
        with self.lock:
            self.buffer.set_state(state)


class ReplayShard(Actor):
    """A ``ShardBuffer`` served over sockets: runners stream ``add_fragment`` into it, the
    learner calls ``sample`` and ``update_priorities``, the driver ``stats``."""

    protocol = Protocol(calls=("sample", "stats"), streams=("add_fragment",),
                        tells=("update_priorities",), test_hooks=("pid",))

    def __init__(self, spec: dict[str, Any]) -> None:
        own = ShardSpec.from_data(spec)
        self.core = ShardBuffer(own.settings(), space_from_data(own.obs_space),
                                space_from_data(own.action_space), own.index)
        # Set (and replaced) whenever a fragment is stored or a batch served: with
        # training_intensity the runners and the learner take turns, and each side waits
        # for the other's next step on it instead of polling (measured: polling every 2-5 ms
        # cost APEX 10% of its updates at training_intensity 8).
        self._changed: asyncio.Event | None = None

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
        self._changed = asyncio.Event()

    async def _wait_for_change(self, timeout: float) -> None:
        if self._changed is None:
            self._changed = asyncio.Event()
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except asyncio.TimeoutError:
            pass

    # --- runners' side (a stream) ---

    async def add_fragment(self, fragment: dict[str, Any]) -> int:
        """A runner's fragment: its n-step transitions into the buffer; how many. Waits
        first while the learner is behind (``ShardBuffer.learner_behind``)."""
        core = self.core
        if core.learner_behind():
            started = asyncio.get_running_loop().time()
            while core.learner_behind():
                # Woken by this actor's next sample; 5 ms at the most, as a learner in the
                # driver samples a local shard's buffer directly, without the actor.
                await self._wait_for_change(0.005)
            core.counters["wait_for_learner_s"] += asyncio.get_running_loop().time() - started
        stored = core.store(fragment)
        self._notify()
        return stored

    # --- the learner's side ---

    async def sample(self, num_items: int, beta: float = 0.4) -> dict[str, Any] | None:
        """A batch; or, while the learner is ahead of training_intensity, one as soon as the
        runners' next fragment allows it (up to ``SAMPLE_WAIT_S``: then None, and the
        learner asks again); None at once while the shard is warming up."""
        got = self.core.sample(num_items, beta)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SAMPLE_WAIT_S
        while got is None and self.core.warm() and loop.time() < deadline:
            await self._wait_for_change(deadline - loop.time())
            got = self.core.sample(num_items, beta)
        if got is not None:
            self._notify()
        return got

    def update_priorities(self, batch_indexes: np.ndarray, td_errors: np.ndarray,
                          incarnation: str) -> int:
        return self.core.update_priorities(batch_indexes, td_errors, incarnation)

    # --- the driver's side ---

    def stats(self) -> dict[str, Any]:
        return self.core.stats()

    def pid(self) -> int:
        return os.getpid()

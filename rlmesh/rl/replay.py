"""Replay memory in numpy arrays: a ring buffer of transition columns (uniform sampling) and
prioritized replay over a vectorized sum tree (Schaul et al. 2016). No sockets: the
off-policy driver (``algorithms/off_policy.py``) and, later, replay shard actors hold one."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlmesh.rl.columns import ColumnSpec, space_layout

#: Transition columns every off-policy learner reads (n-step folded in at insertion, see
#: ``rl/nstep.py``): ``rewards`` is the n-step discounted return, ``next_obs`` the
#: observation n steps on (or where the episode ended), ``discounts`` is gamma**k for the
#: k steps taken and 0 after a termination, so every target is ``r + discounts * V(next_obs)``.
TRANSITION_KEYS = ("obs", "actions", "rewards", "next_obs", "terminateds", "discounts")

# The headroom a buffer must leave of the machine's available memory when built.
MEMORY_FRACTION = 0.9


class ReplayMemoryError(ValueError):
    """A replay buffer that does not fit the machine's memory."""


def transition_columns(obs_space: Any, action_space: Any) -> dict[str, ColumnSpec]:
    """The columns of one stored transition, from the spaces."""
    obs, act = space_layout(obs_space), space_layout(action_space)
    f32 = np.dtype(np.float32)
    return {"obs": obs, "actions": act, "rewards": ColumnSpec((), f32), "next_obs": obs,
            "terminateds": ColumnSpec((), np.dtype(bool)), "discounts": ColumnSpec((), f32)}


def columns_nbytes(capacity: int, specs: dict[str, ColumnSpec]) -> int:
    """Raw bytes of ``capacity`` transitions of ``specs``."""
    per = sum(int(np.prod(s.shape, dtype=np.int64)) * np.dtype(s.dtype).itemsize
              for s in specs.values())
    return int(capacity) * per


def check_memory(nbytes: int, what: str = "replay buffer") -> None:
    """ReplayMemoryError, with the figures, when ``nbytes`` exceeds what this machine has
    available (psutil), less a margin for everything else."""
    import psutil

    available = psutil.virtual_memory().available
    if nbytes > MEMORY_FRACTION * available:
        raise ReplayMemoryError(
            f"the {what} needs {nbytes / 2**30:.2f} GiB but this machine has "
            f"{available / 2**30:.2f} GiB available; lower replay_buffer_config['capacity']")


class ReplayBuffer:
    """``capacity`` transitions in preallocated numpy columns, written in a ring: the
    oldest are overwritten first. ``add`` takes a dict of ``[N, ...]`` columns,
    ``sample(n)`` draws n uniformly (with replacement) and returns copies plus
    ``batch_indexes`` (where each came from)."""

    def __init__(self, capacity: int, specs: dict[str, ColumnSpec], seed: int | None = None,
                 check: bool = True) -> None:
        if capacity < 1:
            raise ValueError(f"replay capacity must be at least 1, got {capacity}")
        self.capacity = int(capacity)
        self.specs = dict(specs)
        if check:  # before anything is allocated
            check_memory(columns_nbytes(self.capacity, self.specs) + self._extra_bytes())
        # np.empty: pages are touched (and count in RSS) only as the ring fills.
        self.columns = {k: np.empty((self.capacity, *s.shape), s.dtype) for k, s in specs.items()}
        self.rng = np.random.default_rng(seed)
        self.next_index = 0
        self.size = 0
        self.num_added = 0

    def _extra_bytes(self) -> int:
        return 0

    def __len__(self) -> int:
        return self.size

    @property
    def size_bytes(self) -> int:
        """Bytes the buffer's arrays take when full (its memory bound)."""
        return sum(a.nbytes for a in self.columns.values()) + self._extra_bytes()

    def add(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """Store the transitions of ``batch`` (every column of the spec, ``[N, ...]``);
        the indexes they went to."""
        n = len(batch["rewards"])
        if n == 0:
            return np.zeros(0, np.int64)
        if n > self.capacity:  # only the newest fit
            batch = {k: v[n - self.capacity:] for k, v in batch.items()}
            n = self.capacity
        idx = (self.next_index + np.arange(n)) % self.capacity
        first = min(n, self.capacity - self.next_index)
        for key, col in self.columns.items():
            values = np.asarray(batch[key])
            # Two slice copies (before and after the wrap) instead of a fancy-index scatter.
            col[self.next_index:self.next_index + first] = values[:first]
            if first < n:
                col[:n - first] = values[first:]
        self.next_index = (self.next_index + n) % self.capacity
        self.size = min(self.size + n, self.capacity)
        self.num_added += n
        return idx

    def sample_indexes(self, n: int) -> np.ndarray:
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        return self.rng.integers(0, self.size, n)

    def gather(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        # take(axis=0), not col[idx]: for a [N, ...] column numpy's fancy indexing copies
        # row by row (~45 us for 256 rows of 4 floats), take copies whole rows in one pass.
        out = {k: col.take(idx, axis=0) for k, col in self.columns.items()}
        out["batch_indexes"] = idx
        return out

    def sample(self, n: int, **_: Any) -> dict[str, np.ndarray]:
        return self.gather(self.sample_indexes(n))

    def update_priorities(self, idx: np.ndarray, td_errors: np.ndarray) -> None:
        """Uniform replay keeps no priorities."""

    # --- checkpoints (store_buffer_in_checkpoints) ---

    def get_state(self) -> dict[str, Any]:
        return {"columns": {k: v[:self.size] for k, v in self.columns.items()},
                "next_index": self.next_index, "size": self.size, "num_added": self.num_added}

    def set_state(self, state: dict[str, Any]) -> None:
        size = min(int(state["size"]), self.capacity)
        for k, col in self.columns.items():
            col[:size] = np.asarray(state["columns"][k])[:size]
        self.size, self.num_added = size, int(state["num_added"])
        self.next_index = int(state["next_index"]) % self.capacity


class SumTree:
    """A binary tree over ``capacity`` leaves (a power of two above it) whose nodes hold the
    sum of their children, in one heap-ordered array (root at 1, leaves from ``leaves``), and
    the least positive leaf, kept exact lazily. ``set`` and ``find`` work on whole index
    arrays, one level at a time: O(batch * log capacity) in a few numpy calls a level."""

    # find starts from the prefix sums of this level's nodes (2**14 = 16384 of them): torch's
    # cumsum of 16K doubles (~20 us; numpy's is ~10x slower) and one binary search replace
    # 14 levels' passes, and set keeps only the levels below it (6 for 1M leaves). Measured
    # against 10, 13 and 15 in the sample + update loop: 14 the fastest, by ~7% over 10.
    SEARCH_LEVEL = 14

    def __init__(self, capacity: int) -> None:
        self.capacity = int(capacity)
        self.leaves = self.num_leaves(capacity)
        self.depth = self.leaves.bit_length() - 1
        # The nodes of level ``cut`` (``first`` of them, from index ``first``) are where find
        # starts; the levels above are neither read nor kept up to date.
        self.cut = min(self.depth, self.SEARCH_LEVEL)
        self.first = 1 << self.cut
        self.sums = np.zeros(2 * self.leaves)
        #: The leaf priorities (a view): what was ``set``, 0 where nothing was.
        self.values = self.sums[self.leaves:self.leaves + self.capacity]
        # The least positive leaf and where it is: a min tree beside the sums cost as much
        # to keep as the sums themselves, but the minimum only moves up when its own leaf
        # is written over (rarely: the rarest transition is the least often replayed), and
        # only then is it looked for again, over all the leaves (``min``).
        self._min, self._argmin, self._min_stale = np.inf, -1, False
        # node >> _shifts: a node's ancestors on every level set keeps, bottom up.
        self._shifts = np.arange(1, self.depth - self.cut + 1, dtype=np.intp)[:, None]
        self._prefix = np.zeros(self.first + 1)  # find's prefix sums, reused

    def set(self, idx: np.ndarray, values: np.ndarray) -> None:
        node = np.asarray(idx, np.intp).reshape(-1) + self.leaves
        if len(node) == 0:
            return
        sums = self.sums
        sums[node] = values
        self._track_min(node, values)
        # Both children of a node sit side by side (2p, 2p + 1): viewed as one complex
        # number (real: left, imag: right) they come in one 1-D gather, numpy's fastest.
        # Parents met twice are recomputed twice from the same children: cheaper than
        # np.unique's sort; and every parent is recomputed from its children (never patched
        # by a delta), so no rounding error builds up however long it runs.
        pairs = sums.view(np.complex128)
        for parents in node >> self._shifts:  # find never reads above the search level
            children = pairs[parents]
            sums[parents] = children.real + children.imag

    def _track_min(self, node: np.ndarray, given: np.ndarray) -> None:
        # What is stored is some of what was given (of an index given twice, the value
        # kept): when nothing given is lower than the minimum (the common case), nothing
        # stored is, and the stored values need not be read back.
        if np.min(given) < self._min:  # rare once full (0 included): the exact way
            written = self.sums[node]
            positive = np.where(written > 0, written, np.inf)
            at = int(positive.argmin())
            if positive[at] < self._min:
                self._min, self._argmin = float(positive[at]), int(node[at]) - self.leaves
        if self._argmin >= 0 and self.values[self._argmin] != self._min:
            self._min_stale = True  # the least one was written over: look again when asked

    @staticmethod
    def num_leaves(capacity: int) -> int:
        return 1 << max(0, int(capacity - 1).bit_length())

    @staticmethod
    def nbytes(capacity: int) -> int:
        """Bytes of the sum tree over ``capacity`` leaves."""
        return 2 * SumTree.num_leaves(capacity) * 8

    @property
    def total(self) -> float:
        return float(self.sums[self.first:2 * self.first].sum())

    @property
    def min(self) -> float:
        """The least positive leaf (inf when there is none)."""
        if self._min_stale:
            positive = np.where(self.values > 0, self.values, np.inf)
            self._argmin = int(positive.argmin())
            self._min, self._min_stale = float(positive[self._argmin]), False
        return self._min

    def prefix(self) -> np.ndarray:
        """The prefix sums of the search level's nodes, from 0 (its last entry: the total);
        ``find`` starts from them. Valid until the next ``set``."""
        # torch's cumsum on the same memory (views made here, so a copied tree never
        # reads another's): ~10x numpy's on 16K doubles.
        level = torch.from_numpy(self.sums[self.first:2 * self.first])
        torch.cumsum(level, 0, out=torch.from_numpy(self._prefix[1:]))
        return self._prefix

    def find(self, mass: np.ndarray) -> np.ndarray:
        """The leaf where each prefix sum ``mass`` (in [0, total)) falls. Rounding can put
        a mass at the very end of a node onto a leaf of priority 0 after it: the caller
        checks (``PrioritizedReplayBuffer.sample``)."""
        # a copy: it is spent on the way down
        return self.descend(np.array(mass, np.float64).reshape(-1), self.prefix())

    def descend(self, mass: np.ndarray, prefix: np.ndarray) -> np.ndarray:
        """``find`` from ``prefix`` (``self.prefix()``), spending ``mass`` (float64, 1-D)
        on the way. Faster when ``mass`` is sorted: the search and the gathers then walk
        memory in order."""
        sums, first = self.sums, self.first
        # The top levels in one step: a binary search of every mass in one level's prefix
        # sums (2**cut nodes), in place of ``cut`` passes.
        node = prefix[1:].searchsorted(mass, side="right")
        np.minimum(node, first - 1, out=node)  # a mass rounded past the end
        mass -= prefix[node]
        node += first
        for _ in range(self.depth - self.cut):  # six numpy calls a level (1-D fancy gathers)
            node += node  # the left child
            left = sums[node]
            go_right = mass >= left
            left *= go_right
            mass -= left
            node += go_right
        node -= self.leaves
        return np.minimum(node, self.capacity - 1, out=node)


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritized replay: transition i is drawn with probability
    p_i^alpha / sum_j p_j^alpha, and weighted by (N * P(i))^-beta / max_j (N * P(j))^-beta
    to undo the bias. New transitions get the highest priority seen so far (or the one
    given, e.g. computed on a runner); ``update_priorities`` sets |TD error| + eps."""

    def __init__(self, capacity: int, specs: dict[str, ColumnSpec], alpha: float = 0.6,
                 eps: float = 1e-6, seed: int | None = None, check: bool = True) -> None:
        super().__init__(capacity, specs, seed, check)
        self.tree = SumTree(capacity)
        self.alpha, self.eps = float(alpha), float(eps)
        self.max_priority = 1.0
        self._slices = np.zeros(0)

    def _extra_bytes(self) -> int:
        return SumTree.nbytes(self.capacity)

    def add(self, batch: dict[str, np.ndarray], priorities: np.ndarray | None = None) -> np.ndarray:
        idx = super().add(batch)
        if len(idx):
            if priorities is None:
                p = np.full(len(idx), self.max_priority ** self.alpha)
            else:
                p = (np.abs(np.asarray(priorities, np.float64))[-len(idx):] + self.eps) ** self.alpha
                self.max_priority = max(self.max_priority, float(p.max() ** (1 / self.alpha)))
            self.tree.set(idx, p)
        return idx

    def sample(self, n: int, beta: float = 0.4, **_: Any) -> dict[str, np.ndarray]:
        """n transitions by priority (stratified: one draw in each of n equal slices of
        the total mass, the slices in random order) with their importance ``weights``."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        tree = self.tree
        prefix = tree.prefix()
        total = float(prefix[-1])
        # In slice order (sorted masses search faster), then the leaves found shuffled:
        # the batch is not in index order.
        # (A mass rounded up to the total lands on the last leaf: checked below, as any.)
        mass = self.rng.random(n)
        mass += self._strata(n)
        mass *= total / n
        idx = tree.descend(mass, prefix)
        self.rng.shuffle(idx)
        p = tree.values[idx]
        if not p.min() > 0:  # rounding at a slice's edge, or nothing to draw from
            idx = self._drawable(idx)
            p = tree.values[idx]
        out = self.gather(idx)
        # (N * P(i))^-beta over its largest value, the rarest transition's: (p_i / p_min)^-beta.
        # RLlib's (and the paper's) normalisation, exact (the tree keeps the minimum), so a
        # weight does not depend on the rest of its batch (Dopamine and Acme divide by the
        # batch's largest weight instead, which would drop the minimum but change the scale).
        weights = np.divide(p, tree.min, dtype=np.float32)  # >= 1; float32's power is cheaper
        out["weights"] = np.power(weights, np.float32(-beta), out=weights)
        return out

    def _strata(self, n: int) -> np.ndarray:
        """0., 1., ..., n - 1 (the slices' starts, in slices), kept for the last n asked."""
        if len(self._slices) != n:
            self._slices = np.arange(n, dtype=np.float64)
        return self._slices

    def _drawable(self, idx: np.ndarray) -> np.ndarray:
        """``idx`` with each leaf of zero priority moved to the nearest drawable one before
        it (after it at the start)."""
        ok = np.flatnonzero(self.tree.values[:self.size] > 0)
        if len(ok) == 0:
            raise ValueError("cannot sample by priority: every priority is 0")
        at = np.searchsorted(ok, idx, side="right") - 1
        return ok[np.maximum(at, 0)]

    def update_priorities(self, idx: np.ndarray, td_errors: np.ndarray) -> None:
        """New priorities |td_error| + eps for the transitions at ``idx`` (the
        ``batch_indexes`` of a sample); an index written over since is updated all the same
        (the learner's error is on the sampled data; the next sample corrects it)."""
        p = np.abs(td_errors, dtype=np.float64).reshape(-1)  # a new array, changed in place
        p += self.eps
        idx = np.asarray(idx, np.int64).reshape(-1)
        if len(idx) == 0:
            return
        self.max_priority = max(self.max_priority, float(p.max()))
        self.tree.set(idx, np.power(p, self.alpha, out=p))

    def get_state(self) -> dict[str, Any]:
        return {**super().get_state(), "priorities": self.tree.values[:self.size],
                "max_priority": self.max_priority}

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        if self.size:
            self.tree.set(np.arange(self.size), np.asarray(state["priorities"])[:self.size])
        self.max_priority = float(state.get("max_priority", 1.0))

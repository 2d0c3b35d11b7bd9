"""``MinibatchSGD``: the one minibatch loop every torch policy's update runs (on-policy and
off-policy alike): the batch onto the learner's device, the learning-rate schedule, the
minibatches of each epoch, one gradient step per minibatch, and the update's statistics.

An algorithm's ``update`` reads top to bottom around it, calling its own loss directly::

    sgd = MinibatchSGD(self, timesteps)
    train = self.prepare_batch(sgd.on_device(batch))      # e.g. GAE, V-trace
    for mb in sgd.minibatches(train, num_epochs, minibatch_size, num_minibatches):
        with self.precision():
            loss, stats = self.loss(mb)
        sgd.step(loss, stats)                             # backward, all-reduce, clip, step
    return sgd.finish()

The loop lives in a generator and the step in a plain call, so neither adds a frame between
``update`` and ``loss``.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Protocol

import numpy as np
import torch

from rlmesh.policy.learner_stats import mean_stats
from rlmesh.policy.recurrent import SEQ_MASK, sequence_minibatches
from rlmesh.rl.batch import minibatches, to_tensors
from rlmesh.rl.columns import SampleBatch

Tensors = dict[str, torch.Tensor]


class Learning(Protocol):
    """What the loop reads and calls of a policy (``TorchPolicy`` has it all; a Protocol, so
    this module, which torch_policy.py imports, need not import it)."""

    config: Any  # the algorithm's config
    device: torch.device
    optimizer: Any  # torch.optim.Optimizer, or rl/optim.py's Optimizers
    data_parallel: Any  # a DataParallel when learners train together, else None
    bf16: bool
    state: dict[str, Any]
    global_timestep: int
    num_updates: int
    num_env_steps_trained: int
    num_nonfinite_updates_skipped: int
    after_train_step: Callable[..., Any] | None
    gradient_step: Callable[..., bool] | None  # step() hands its gradient step to it, if set

    def for_learning(self) -> Learning: ...

    def apply_learning_rates(self, timesteps: int) -> dict[str, float]: ...

    def trainable_parameters(self) -> list[torch.nn.Parameter]: ...

    def extra_grad_process(self) -> dict[str, torch.Tensor]: ...

    def finite_update(self, loss: torch.Tensor | None, norm: torch.Tensor | None) -> bool: ...

    def update_stats(self, train: Tensors, chunk: int) -> dict[str, Any]: ...

    def after_update(self, stats: dict[str, Any]) -> None: ...


class MinibatchSGD:
    """One update of ``policy`` at ``timesteps`` env steps sampled: made at its start (it
    readies the optimizer and sets the learning rates), stepped per minibatch, finished once."""

    def __init__(self, policy: Learning, timesteps: int) -> None:
        self.policy = policy.for_learning()
        policy.global_timestep = timesteps
        self.rates = policy.apply_learning_rates(timesteps)  # what results report them as
        self.steps: list[dict[str, Any]] = []  # each applied step's statistics, read once
        self.train: Tensors | None = None  # what update_stats reads (minibatches() sets it)
        self.chunk = 0  # the minibatch size update_stats computes in
        self.env_steps = 0  # the env steps this update trains on

    def on_device(self, batch: dict[str, Any]) -> Tensors:
        """The batch's arrays as tensors on the learner's device (other entries dropped)."""
        arrays = {k: v for k, v in batch.items() if isinstance(v, (np.ndarray, torch.Tensor))}
        device = self.policy.device
        if device.type == "cuda":  # from page-locked host memory, without blocking
            from rlmesh.policy.device import to_device

            return to_device(arrays, device)
        return to_tensors(arrays, device)

    def minibatches(self, train: Tensors, num_epochs: int | None = None,
                    minibatch_size: int | None = None, num_minibatches: int | None = None
                    ) -> Iterator[Tensors]:
        """``num_epochs`` (default the config's) passes over ``train``, each cut into
        shuffled minibatches of ``minibatch_size`` samples (whole sequences of about that
        many steps for a recurrent policy), or into ``num_minibatches`` parts (data-parallel
        ranks, so that all step equally often). A batch marked ``_whole_batch`` stays whole
        and time-major: one step on all of it per epoch."""
        policy, cfg = self.policy, self.policy.config
        whole = bool(train.pop("_whole_batch", False))
        train = train if isinstance(train, SampleBatch) else SampleBatch(train)
        n = int(train["mask"].sum()) if whole else len(next(iter(train.values())))
        wanted = minibatch_size or cfg.minibatch_size
        size = min(wanted or n, max(n, 1))
        sequences = SEQ_MASK in train and not whole
        lengths = train[SEQ_MASK].sum(1).cpu().numpy() if sequences else None
        self.env_steps = int(lengths.sum()) if sequences else n
        if sequences:  # n sequences: minibatches of whole ones, of about `wanted` steps each
            parts = num_minibatches or max(1, round(self.env_steps / (wanted or self.env_steps)))
            size = max(1, -(-n // max(parts, 1)))
        self.train, self.chunk = (None if whole else train), size
        # Only shuffling draws from it (seeding from the OS costs ~35 us an update here).
        rng = (np.random.default_rng(None if cfg.seed is None else cfg.seed + policy.num_updates)
               if cfg.shuffle_batch_per_epoch and not whole else None)
        cut = not whole and (size < n or num_minibatches is not None)
        for _ in range(cfg.num_epochs if num_epochs is None else num_epochs):
            if not cut:
                yield train
                continue
            cuts = (sequence_minibatches(lengths, wanted or self.env_steps, rng, parts)
                    if sequences else minibatches(n, size, rng, num_minibatches))
            for idx in cuts:
                yield take_rows(train, idx, policy.device)

    def rows(self, train: Tensors) -> Iterator[Tensors]:
        """The minibatches of a ``[K, B, ...]`` batch (replay's): each leading row once,
        K gradient steps."""
        k_steps, size = next(iter(train.values())).shape[:2]
        self.env_steps = k_steps * size
        for k in range(k_steps):
            yield {key: v[k] for key, v in train.items()}

    def step(self, loss: torch.Tensor, stats: dict[str, Any]) -> bool:
        """One gradient step on ``loss``; False where it was not applied (a non-finite loss
        or gradient, ``on_nonfinite`` "skip")."""
        hook = getattr(self.policy, "gradient_step", None)
        if hook is not None:  # a Learner subclass's compute/apply_gradients (roles/learner_hooks.py)
            return hook(self, loss, stats)
        self.policy.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        return self.apply(stats, loss)

    def apply(self, stats: dict[str, Any], loss: torch.Tensor | None = None) -> bool:
        """The optimizer step with the gradients as they stand: averaged over data-parallel
        ranks, processed (clipped: ``extra_grad_process``), checked for NaN/inf; ``stats``
        (with the gradient norm) join the update's statistics when it was applied."""
        policy = self.policy
        if policy.data_parallel is not None:  # every learner steps on the mean gradient
            policy.data_parallel.average_gradients(policy.trainable_parameters())
        if policy.bf16:
            stats = _float32(stats)
        stats = {**stats, **policy.extra_grad_process()}
        if not policy.finite_update(loss, stats.get("gradients_norm")):
            return False
        policy.optimizer.step()
        self.steps.append(stats)
        return True

    def finish(self) -> dict[str, Any]:
        """The update's statistics (each one's mean over the steps applied, and the whole
        batch's ``update_stats``); then ``after_update`` and the counters."""
        policy = self.policy
        result = mean_stats(self.steps)
        if self.train is not None:
            result.update(mean_stats([policy.update_stats(self.train, self.chunk)]))
        result["num_nonfinite_updates_skipped"] = policy.num_nonfinite_updates_skipped
        policy.num_updates += 1
        policy.num_env_steps_trained += self.env_steps
        policy.after_update(result)
        if policy.after_train_step is not None and callable(
                policy.after_train_step(policy, result)):  # RLlib's factory form, unrunnable here
            raise TypeError("after_train_step returned a function: RLlib's form "
                            "after_train_step(workers, config) -> fn(fetches) cannot run in "
                            "rlmesh, which calls after_train_step(policy, stats) in the learner "
                            "after every update; write it so")
        result.update(**self.rates, num_grad_updates=len(self.steps),
                      num_env_steps_trained=self.env_steps, **policy.state)
        return result


# Column dtypes numpy gathers (bfloat16 has no numpy dtype: torch gathers those).
_NUMPY_TAKES = frozenset({torch.float32, torch.float64, torch.float16, torch.int64, torch.int32,
                          torch.int16, torch.int8, torch.uint8, torch.bool})


def take_rows(train: Tensors, idx: np.ndarray, device: torch.device) -> SampleBatch:
    """The rows ``idx`` of every column: what ``v[idx]`` gives, new tensors. On the CPU
    numpy's ``take`` gathers them: 3-6 us a column where torch's advanced indexing took
    9-37 us and ``index_select`` 3-13 (a [4096] minibatch of a [16384] batch; 1-3% of a
    CartPole PPO update at minibatch 4096). Elsewhere ``index_select``."""
    if device.type == "cpu":
        out = {}
        for k, v in train.items():
            if not isinstance(v, torch.Tensor):  # a column a user's prepare_batch left as is
                out[k] = v[idx]
            elif v.dtype in _NUMPY_TAKES and not v.requires_grad and v.device.type == "cpu":
                out[k] = torch.from_numpy(np.take(v.numpy(), idx, axis=0))
            else:
                out[k] = v.index_select(0, torch.as_tensor(idx, device=v.device))
        return SampleBatch(out)
    index = torch.as_tensor(idx, device=device)
    return SampleBatch({k: v.index_select(0, index) if isinstance(v, torch.Tensor) else v[idx]
                        for k, v in train.items()})


def _float32(stats: dict[str, Any]) -> dict[str, Any]:
    """Statistics in float32 (mean_stats stacks them): a loss under bf16 autocast reports
    bfloat16 ones."""
    return {k: v.float() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
            for k, v in stats.items()}

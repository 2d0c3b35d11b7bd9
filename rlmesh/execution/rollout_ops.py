"""RLlib's ``ray.rllib.execution.rollout_ops`` on rlmesh's sampling: ``ParallelRollouts``
(``synchronous_parallel_sample``, or ``foreach_env_runner_async``), ``ConcatBatches``,
``SelectExperiences``, ``StandardizeFields`` and ``AsyncGradients`` (the runners'
``sample_and_compute_gradients``, as A3C's). Their items are ``Fragments``: the runners'
time-major fragments, which rlmesh's learners take as they are."""

from __future__ import annotations

import logging
from typing import Any, Iterable, NoReturn

import numpy as np

from rlmesh.algorithms.execution import plan_parts
from rlmesh.execution._refuse import refuse
from rlmesh.execution.local_iterator import LocalIterator
from rlmesh.rl.columns import (DEFAULT_POLICY_ID, FRAGMENT_KEYS, Columns, MissingColumn,
                               merge_by_policy)

log = logging.getLogger(__name__)

#: Columns rlmesh's learners compute from the time-major batch (``postprocess_trajectory``,
#: PPO's ``prepare_batch``, which standardizes the advantages): not in a plan's batches.
LEARNER_COLUMNS = (Columns.ADVANTAGES, Columns.VALUE_TARGETS)
_said: set[str] = set()


class Fragments(list):
    """A batch as a plan's operators pass it (RLlib's SampleBatch / MultiAgentBatch): the
    list of the runners' fragments, each one policy's time-major columns ``[T, B, ...]``
    (a multi-agent runner's: one per policy under ``policy_batches``)."""

    @property
    def count(self) -> int:
        """Env steps (RLlib's ``count``)."""
        return sum(int(f["env_steps"]) for f in self)

    @property
    def policy_batches(self) -> dict[str, dict[str, np.ndarray]]:
        """Each policy's fragments merged: ``{policy_id: time-major batch}``, what
        ``learner_group.update_from_batch`` takes."""
        return merge_by_policy(self)


def ParallelRollouts(workers: Any, *, mode: str = "bulk_sync",
                     num_async: int = 1) -> LocalIterator:
    """Endless batches of experience from the env runners. ``bulk_sync``: a round, one
    fragment from each runner (``synchronous_parallel_sample``), the runners acting with the
    newest published weights; ``async``: each runner's fragment as it comes
    (``foreach_env_runner_async("sample")``), the runner sampling its next one at once."""
    algo, _ = plan_parts(workers, "ParallelRollouts")
    if mode == "bulk_sync":
        return LocalIterator(_rounds(algo), "ParallelRollouts(bulk_sync)")
    if mode == "async":
        if num_async != 1:
            raise ValueError(f"ParallelRollouts(mode='async', num_async={num_async}): rlmesh "
                             "keeps one sample request in flight per runner; leave num_async 1")
        return LocalIterator(_as_they_come(algo), "ParallelRollouts(async)")
    if mode == "raw":
        raise ValueError("ParallelRollouts(mode='raw') hands RLlib's actor iterators; rlmesh "
                         "has none: use mode='bulk_sync' or 'async'")
    raise ValueError(f"ParallelRollouts: mode is 'bulk_sync' or 'async', got {mode!r}")


def _rounds(algo: Any) -> Iterable[Fragments]:
    runners = algo.env_runners
    while True:
        with algo.timer("sample_time_s"):
            # 1 env step asks for one round: every healthy runner's next fragment.
            fragments = Fragments(runners.sample(1))
        yield fragments  # outside the timer: the consumer learns on it meanwhile


def _as_they_come(algo: Any) -> Iterable[Fragments]:
    runners = algo.env_runners
    while True:
        with algo.timer("sample_time_s"):
            runners.foreach_env_runner_async("sample")
            ready = runners.fetch_ready_async_reqs()
        for _, fragment in ready:
            runners.record([fragment])  # its episodes and env steps: this iteration's
            yield Fragments([fragment])


class ConcatBatches:
    """Batches joined until they hold ``min_batch_size`` env steps (``combine`` with it):
    ``[]`` until then, then ``[joined]``."""

    def __init__(self, min_batch_size: int, count_steps_by: str = "env_steps") -> None:
        if count_steps_by != "env_steps":
            raise ValueError("ConcatBatches counts env steps in rlmesh (count_steps_by="
                             f"{count_steps_by!r}); set count_steps_by in the config instead")
        self.min_batch_size = int(min_batch_size)
        self._buffer = Fragments()

    def __call__(self, batch: Fragments) -> list[Fragments]:
        self._buffer.extend(_fragments(batch, "ConcatBatches"))
        if self._buffer.count < self.min_batch_size:
            return []
        out, self._buffer = self._buffer, Fragments()
        return [out]


class SelectExperiences:
    """The batch cut to the fragments of ``policy_ids`` (a multi-agent fragment keeps
    those policies' parts)."""

    def __init__(self, policy_ids: Iterable[str]) -> None:
        if isinstance(policy_ids, str):
            raise TypeError(f"SelectExperiences takes a list of policy ids, got the string "
                            f"{policy_ids!r}; write [{policy_ids!r}]")
        self.policy_ids = set(policy_ids)

    def __call__(self, batch: Fragments) -> Fragments:
        out = Fragments()
        for f in _fragments(batch, "SelectExperiences"):
            if "policy_batches" in f:
                parts = {p: b for p, b in f["policy_batches"].items() if p in self.policy_ids}
                if parts:
                    out.append({**f, "policy_batches": parts})
            elif f.get("policy_id", DEFAULT_POLICY_ID) in self.policy_ids:
                out.append(f)
        return out


class StandardizeFields:
    """Each of ``fields`` to mean 0, std 1 over each policy's steps (padding excluded).
    rlmesh computes advantages and value targets on the learner, from the time-major
    batch (PPO's learner standardizes its advantages there): such a field, absent here, is
    left to the learner, said once; any other absent field is one line."""

    def __init__(self, fields: Iterable[str]) -> None:
        if isinstance(fields, str):
            raise TypeError(f"StandardizeFields takes a list of columns, got the string "
                            f"{fields!r}; write [{fields!r}]")
        self.fields = list(fields)

    def __call__(self, batch: Fragments) -> Fragments:
        batch = _fragments(batch, "StandardizeFields")
        by_policy: dict[str, list[dict[str, Any]]] = {}
        for f in batch:
            for part in (f["policy_batches"].values() if "policy_batches" in f else [f]):
                by_policy.setdefault(part.get("policy_id", DEFAULT_POLICY_ID), []).append(part)
        for field in self.fields:
            for pid, parts in by_policy.items():
                if all(field in p for p in parts):
                    _standardize(parts, field)
                else:
                    self._absent(field, pid, parts[0])
        return batch

    @staticmethod
    def _absent(field: str, pid: str, part: dict[str, Any]) -> None:
        if field not in LEARNER_COLUMNS:
            columns = sorted(k for k in part if k not in FRAGMENT_KEYS)
            raise MissingColumn(f"StandardizeFields: policy {pid!r}'s batch has no column "
                                f"{field!r} (it has {', '.join(columns)})")
        if field not in _said:
            _said.add(field)
            log.warning("StandardizeFields([%r]): rlmesh computes %s on the learner, from the "
                        "time-major batch (PPO's learner standardizes its advantages there; a "
                        "template policy's postprocess_fn decides for its own): the plan's "
                        "batch, which has none yet, passes on as it is", field, field)


def _standardize(parts: list[dict[str, Any]], field: str) -> None:
    """``field`` of the fragments ``parts`` standardized in place over their real steps."""
    values = [np.asarray(p[field], np.float64) for p in parts]
    masks = [np.asarray(p.get(Columns.MASK, np.ones(v.shape[:2], bool)), bool) for p, v
             in zip(parts, values)]
    real = np.concatenate([v[m] for v, m in zip(values, masks)])
    mean, std = real.mean(), max(real.std(), 1e-4)
    for p, v in zip(parts, values):
        p[field] = ((v - mean) / std).astype(np.asarray(p[field]).dtype)


def AsyncGradients(workers: Any) -> LocalIterator:
    """Endless ``(gradients, count)``: each runner samples a fragment with its weights and
    computes the gradients of its policy's loss on it (``sample_and_compute_gradients``, as
    rlmesh's A3C asks), one item per runner as it answers, which at once samples its next
    one. ``ApplyGradients(update_all=False)`` sends new weights back to that runner."""
    algo, context = plan_parts(workers, "AsyncGradients")
    runners = algo.env_runners

    def gradients() -> Iterable[tuple[dict[str, Any], int]]:
        runners.sync_weights()  # every runner starts from the learner's weights
        while True:
            with algo.timer("sample_time_s"):  # the runners sample and compute meanwhile
                runners.foreach_env_runner_async("sample_and_compute_gradients")
                ready = runners.fetch_ready_async_reqs()
            for worker_index, reply in ready:
                grads, pid = reply.pop("gradients"), reply["policy_id"]
                runners.record([reply])  # its episodes and env steps, for the result
                context.current_worker = worker_index
                context.learner_info[pid] = dict(reply["stats"])
                yield {pid: grads}, int(reply["env_steps"])

    return LocalIterator(gradients(), "AsyncGradients")


def _fragments(batch: Any, operator: str) -> Fragments:
    if not isinstance(batch, list):
        raise TypeError(f"{operator} takes the batches ParallelRollouts yields (Fragments), "
                        f"got {type(batch).__name__}")
    return batch if isinstance(batch, Fragments) else Fragments(batch)


def __getattr__(name: str) -> NoReturn:
    refuse(name, __name__)


__all__ = ["AsyncGradients", "ConcatBatches", "Fragments", "ParallelRollouts",
           "SelectExperiences", "StandardizeFields"]

"""Execution plans as rlmesh runs them: RLlib's ``execution_plan(workers, config)`` is called
once, at the first ``train()``, and each training step is the next item of the iterator it
returns: that iteration's learner statistics by policy id (what ``training_step`` returns;
``train()`` makes the result around them). RLlib's dataflow operators are not here
(``rlmesh.execution`` names them and says so); a plan is written with these blocks, or
better as a ``training_step`` (docs/policies.md)."""

from __future__ import annotations

from typing import Any, Callable, Iterator

from rlmesh.driver.env_runner_group import synchronous_parallel_sample
from rlmesh.rl.columns import merge_by_policy


class PlanWorkers:
    """What a plan receives as ``workers``: the algorithm's env runner group (its methods:
    ``sync_weights``, ``foreach_env_runner``, ``foreach_env_runner_async``, ...), and
    ``learner_group`` and ``algorithm`` besides."""

    def __init__(self, algo: Any) -> None:
        self.algorithm = algo
        self.learner_group = algo.learner_group

    def __getattr__(self, name: str) -> Any:
        return getattr(self.algorithm.env_runners, name)


def plan_step(algo: Any, plan: Callable[[Any, Any], Any]) -> dict[str, dict[str, Any]]:
    """One training step of an algorithm built with ``execution_plan=plan``."""
    iterator = algo.__dict__.get("_plan_iterator")
    if iterator is None:
        iterator = algo.__dict__["_plan_iterator"] = iter(plan(PlanWorkers(algo), algo.config))
    try:
        stats = next(iterator)
    except StopIteration:
        raise RuntimeError(f"execution_plan {getattr(plan, '__name__', plan)} ran out: return an "
                           "endless iterator (train() takes one item per iteration)") from None
    if not (isinstance(stats, dict) and all(isinstance(v, dict) for v in stats.values())):
        raise TypeError(f"execution_plan {getattr(plan, '__name__', plan)} gave "
                        f"{type(stats).__name__}; each item is the iteration's learner "
                        "statistics by policy id, {policy_id: {name: number}} (train_one_step's)")
    return stats


def parallel_rollouts(workers: PlanWorkers, config: Any) -> Iterator[list[dict[str, Any]]]:
    """Endless: the fragments of ``train_batch_size`` env steps from every runner, round
    after round (``synchronous_parallel_sample``); RLlib's ``ParallelRollouts(bulk_sync)``."""
    algo = workers.algorithm
    while True:
        with algo.timer("sample_time_s"):
            yield synchronous_parallel_sample(algo.env_runners,
                                              max_env_steps=config.train_batch_size)


def train_one_step(workers: PlanWorkers, fragments: list[dict[str, Any]]) -> dict[str, Any]:
    """Update every policy from ``fragments`` and publish the new weights; the learner
    statistics by policy id (RLlib's ``TrainOneStep``)."""
    algo = workers.algorithm
    if not any(f["env_steps"] for f in fragments):
        return {}
    with algo.timer("learn_time_s"):
        stats = algo.learner_group.update_from_batch(merge_by_policy(fragments),
                                                     timesteps=algo.timesteps_sampled)
    algo.env_runners.sync_weights(sorted(stats) or None)
    return stats


def synchronous_plan(workers: PlanWorkers, config: Any) -> Iterator[dict[str, Any]]:
    """``Algorithm.training_step`` as a plan: sample, update, publish, forever."""
    return (train_one_step(workers, fragments)
            for fragments in parallel_rollouts(workers, config))


__all__ = ["PlanWorkers", "parallel_rollouts", "plan_step", "synchronous_plan", "train_one_step"]

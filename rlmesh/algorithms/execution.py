"""Execution plans as rlmesh runs them: RLlib's ``execution_plan(workers, config)`` is called
once, at the first ``train()``; each iteration pulls the iterator it returns. An item is
either the iteration's result (what ``StandardMetricsReporting`` yields: ``train()`` returns
it) or one training step's learner statistics by policy id (``train()`` makes the result
around them). RLlib's operators are in ``rlmesh.execution``; the two blocks here are the
smallest plan."""

from __future__ import annotations

from typing import Any, Callable, Iterator

from rlmesh.config.settings import ConfigError
from rlmesh.driver.env_runner_group import synchronous_parallel_sample
from rlmesh.driver.worker_set import WorkerSet
from rlmesh.rl.columns import merge_by_policy

#: Config keys a Trainer-era plan reads that rlmesh has no field for, and what they read as:
#: rlmesh's learner has one update path (TrainOneStep's), as RLlib's torch PPO set it.
PLAN_KEYS = {"simple_optimizer": True}


class PlanContext:
    """What the operators of one plan share (RLlib's shared metrics of the iterator): the
    newest learner statistics by policy id, the env steps trained since the iteration's
    result last looked, and the runner whose gradients are being applied."""

    def __init__(self) -> None:
        self.learner_info: dict[str, dict[str, Any]] = {}
        self.current_worker: int | None = None
        self._trained: dict[str, int] = {}

    def learned(self, stats: dict[str, dict[str, Any]], env_steps: int | None = None) -> None:
        """A training step's statistics; ``env_steps``: what it trained on, where the
        statistics do not say (``num_env_steps_trained``)."""
        for pid, s in stats.items():
            self.learner_info[pid] = dict(s)
            steps = s.get("num_env_steps_trained", env_steps or 0)
            self._trained[pid] = self._trained.get(pid, 0) + int(steps)

    def step_stats(self) -> dict[str, dict[str, Any]]:
        """The newest learner statistics by policy id, each with the env steps trained
        since the last call (what an iteration counts and reports)."""
        out = {pid: {**s, "num_env_steps_trained": self._trained.get(pid, 0)}
               for pid, s in self.learner_info.items()}
        self._trained = {}
        return out


class PlanWorkers(WorkerSet):
    """What a plan receives as ``workers``: ``algo.workers`` (RLlib's WorkerSet:
    ``local_worker()``, ``trainable_policies()``, ``foreach_worker``, ...), the env runner
    group's methods besides (``sync_weights(policies, to_worker_indices)``,
    ``foreach_env_runner_async``, ``fetch_ready_async_reqs``, ...), and ``learner_group``,
    ``algorithm`` and ``context`` (the plan's shared state, ``PlanContext``)."""

    def __init__(self, algo: Any) -> None:
        super().__init__(algo)
        self.algorithm = algo
        self.learner_group = algo.learner_group
        self.context = PlanContext()

    def sync_weights(self, policies: list[str] | None = None,
                     to_worker_indices: list[int] | None = None) -> int:
        """The env runner group's ``sync_weights`` (all runners by default)."""
        return self.algorithm.env_runners.sync_weights(policies, to_worker_indices)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.algorithm.env_runners, name)


class PlanConfig:
    """The config as a plan reads it: ``config["key"]`` and ``config.key`` as the
    algorithm's config gives them, and ``PLAN_KEYS`` (``config["simple_optimizer"]``)."""

    def __init__(self, config: Any) -> None:
        self._config = config

    def __getitem__(self, key: str) -> Any:
        try:
            return self._config[key]
        except ConfigError:
            if key in PLAN_KEYS:
                return PLAN_KEYS[key]
            raise

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except ConfigError:
            return default

    def __contains__(self, key: str) -> bool:
        return key in PLAN_KEYS or key in self._config

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # its own _config, before it is set (copy, pickle)
            raise AttributeError(name)
        return getattr(self._config, name)


def plan_parts(workers: Any, operator: str) -> tuple[Any, PlanContext]:
    """The algorithm and the shared context of the plan ``workers`` was given to; else one
    line (an operator is for the ``workers`` an execution plan receives)."""
    if not isinstance(workers, PlanWorkers):
        raise TypeError(f"{operator} takes the workers an execution_plan(workers, config) "
                        f"receives, got {type(workers).__name__}")
    return workers.algorithm, workers.context


# --- how train() runs a plan ---

def _plan_name(plan: Callable[..., Any]) -> str:
    return getattr(plan, "__name__", repr(plan))


def _next_item(algo: Any, plan: Callable[[Any, Any], Any]) -> Any:
    """The plan's next item (the plan is called at the first)."""
    iterator = algo.__dict__.get("_plan_iterator")
    if iterator is None:
        made = plan(PlanWorkers(algo), PlanConfig(algo.config))
        try:
            iterator = algo.__dict__["_plan_iterator"] = iter(made)
        except TypeError:
            raise TypeError(f"execution_plan {_plan_name(plan)} returned "
                            f"{type(made).__name__}; return an iterator (a LocalIterator, a "
                            "generator)") from None
    try:
        return next(iterator)
    except StopIteration:
        raise RuntimeError(f"execution_plan {_plan_name(plan)} ran out: return an endless "
                           "iterator (train() takes one item per iteration)") from None


def _checked_stats(plan: Callable[..., Any], stats: Any) -> dict[str, dict[str, Any]]:
    if not (isinstance(stats, dict) and all(isinstance(v, dict) for v in stats.values())):
        raise TypeError(f"execution_plan {_plan_name(plan)} gave {type(stats).__name__}; each "
                        "item is the iteration's learner statistics by policy id, {policy_id: "
                        "{name: number}} (train_one_step's), or the result "
                        "StandardMetricsReporting(train_op, workers, config) yields")
    return stats


def plan_step(algo: Any, plan: Callable[[Any, Any], Any]) -> dict[str, dict[str, Any]]:
    """One training step of an algorithm built with ``execution_plan=plan`` whose items are
    learner statistics (``algo.training_step()`` called directly)."""
    return _checked_stats(plan, _next_item(algo, plan))


class _PlanResult(Exception):
    """A result the plan yielded, ending the iteration ``run_iteration`` was making."""

    def __init__(self, result: Any) -> None:
        super().__init__("an execution plan's result")
        self.result = result


def plan_iteration(algo: Any, plan: Callable[[Any, Any], Any]) -> dict[str, Any]:
    """One ``train()`` iteration of an algorithm built with ``execution_plan=plan``: the
    result the plan yields (``StandardMetricsReporting`` made it, advancing the iteration),
    or the result made around its items of learner statistics, pulled until
    ``min_time_s_per_iteration`` has passed (``algo.run_iteration``)."""
    def step() -> dict[str, dict[str, Any]]:
        before = algo.iteration
        item = _next_item(algo, plan)
        if algo.iteration != before:  # a whole iteration's result: StandardMetricsReporting's
            raise _PlanResult(item)
        return _checked_stats(plan, item)

    try:
        return algo.run_iteration(step)
    except _PlanResult as made:
        if not (isinstance(made.result, dict) and "training_iteration" in made.result):
            raise TypeError(f"execution_plan {_plan_name(plan)} turned the result "
                            f"StandardMetricsReporting made into {type(made.result).__name__}; "
                            "yield the result dict (changed or not)") from None
        return made.result


# --- the two blocks of the smallest plan ---

def parallel_rollouts(workers: PlanWorkers, config: Any) -> Iterator[list[dict[str, Any]]]:
    """Endless: the fragments of ``train_batch_size`` env steps from every runner, round
    after round (``synchronous_parallel_sample``)."""
    algo = workers.algorithm
    while True:
        with algo.timer("sample_time_s"):
            fragments = synchronous_parallel_sample(algo.env_runners,
                                                    max_env_steps=config.train_batch_size)
        yield fragments  # outside the timer: the consumer learns on it meanwhile


def train_one_step(workers: PlanWorkers, fragments: list[dict[str, Any]]) -> dict[str, Any]:
    """Update every policy from ``fragments`` and publish the new weights; the learner
    statistics by policy id."""
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


def runners_act_as_learners(specs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Policy specs whose runners act with the learner's class itself (torch), not a numpy
    copy: a plan may ask them for gradients (``AsyncGradients``)."""
    return {pid: {**spec, "runner_class": spec["policy_class"]} for pid, spec in specs.items()}


__all__ = ["PLAN_KEYS", "PlanConfig", "PlanContext", "PlanWorkers", "parallel_rollouts",
           "plan_iteration", "plan_step", "synchronous_plan", "train_one_step"]

"""RLlib's ``ray.rllib.execution.train_ops`` on rlmesh's learner group: ``TrainOneStep``
(``learner_group.update_from_batch``, then the weights published) and ``ApplyGradients``
(``learner_group.apply_gradients``, then the weights to one runner or all). The TensorFlow
multi-GPU op and the target-network op name what rlmesh does instead."""

from __future__ import annotations

from typing import Any, Iterable, NoReturn

from rlmesh.algorithms.execution import plan_parts
from rlmesh.execution._refuse import refuse
from rlmesh.execution.rollout_ops import Fragments
from rlmesh.rl.columns import DEFAULT_POLICY_ID

#: A minibatch size no batch reaches: one minibatch of the whole batch (RLlib's
#: ``sgd_minibatch_size=0``).
WHOLE_BATCH = 2 ** 62


class TrainOneStep:
    """Update the policies (``policies``, default every trainable one) on a batch:
    ``num_sgd_iter`` passes of ``sgd_minibatch_size`` minibatches (0: the whole batch, as
    RLlib's ``learn_on_batch``), then publish their weights to every runner. Returns
    ``(batch, learner statistics by policy id)``, as RLlib's did."""

    def __init__(self, workers: Any, policies: Iterable[str] = frozenset(),
                 num_sgd_iter: int = 1, sgd_minibatch_size: int = 0) -> None:
        self.algo, self.context = plan_parts(workers, "TrainOneStep")
        self.policies = set(policies) or set(workers.trainable_policies())
        self.num_sgd_iter = int(num_sgd_iter)
        self.minibatch_size = int(sgd_minibatch_size) or WHOLE_BATCH

    def __call__(self, batch: Fragments) -> tuple[Fragments, dict[str, dict[str, Any]]]:
        if not isinstance(batch, list):
            raise TypeError(f"TrainOneStep takes the batches ParallelRollouts yields "
                            f"(Fragments), got {type(batch).__name__}")
        batch = batch if isinstance(batch, Fragments) else Fragments(batch)
        batches = {p: b for p, b in batch.policy_batches.items() if p in self.policies}
        if not batches:  # no steps (an idle policy server), or none of these policies'
            return batch, {}
        algo = self.algo
        with algo.timer("learn_time_s"):
            stats = algo.learner_group.update_from_batch(
                batches, timesteps=algo.timesteps_sampled, num_iters=self.num_sgd_iter,
                minibatch_size=self.minibatch_size)
        algo.env_runners.sync_weights(sorted(stats) or None)
        self.context.learned(stats)
        return batch, stats


class ApplyGradients:
    """One optimizer step with ``(gradients, count)`` (``AsyncGradients``' items; the
    gradients by parameter name, or by policy id then name). ``update_all``: the new weights
    to every runner (through the param server); False: to the runner whose gradients they
    were only (``env_runners.sync_weights(to_worker_indices=[i])``), the others acting on
    with theirs, as RLlib's A3C. Returns None, as RLlib's did."""

    def __init__(self, workers: Any, policies: Iterable[str] = frozenset(),
                 update_all: bool = True) -> None:
        self.algo, self.context = plan_parts(workers, "ApplyGradients")
        self.policies = sorted(policies) or None
        self.update_all = bool(update_all)

    def __call__(self, item: Any) -> None:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], dict)):
            raise ValueError(f"ApplyGradients takes (gradients, count) as AsyncGradients "
                             f"yields them, got {type(item).__name__}")
        gradients, count = item
        by_policy = (gradients if gradients and all(isinstance(g, dict) for g in gradients.values())
                     else {DEFAULT_POLICY_ID: gradients})
        algo, context = self.algo, self.context
        with algo.timer("learn_time_s"):
            algo.learner_group.apply_gradients(by_policy, timesteps=algo.timesteps_sampled)
        pids = self.policies or sorted(by_policy)
        context.learned({p: context.learner_info.get(p, {}) for p in by_policy}, int(count))
        if self.update_all:
            algo.env_runners.sync_weights(pids)
            return
        if context.current_worker is None:
            raise ValueError("ApplyGradients(update_all=False) updates the runner whose "
                             "gradients these are; take them from AsyncGradients(workers), "
                             "or set update_all=True")
        algo.env_runners.sync_weights(pids, to_worker_indices=[context.current_worker])


def TrainTFMultiGPU(*args: Any, **kwargs: Any) -> NoReturn:
    """TensorFlow's multi-GPU towers: rlmesh trains with torch."""
    raise NotImplementedError(
        "TrainTFMultiGPU is TensorFlow's multi-GPU op; rlmesh trains with torch: use "
        "TrainOneStep(workers, num_sgd_iter=..., sgd_minibatch_size=...) (config "
        "['simple_optimizer'] reads True), and num_learners for several GPUs")


MultiGPUTrainOneStep = TrainTFMultiGPU


def UpdateTargetNetwork(*args: Any, **kwargs: Any) -> NoReturn:
    """rlmesh's Q-learning learners update their target networks themselves."""
    raise NotImplementedError(
        "UpdateTargetNetwork: rlmesh's DQN-family learners update their target network "
        "every target_network_update_freq env steps themselves; set that in the config and "
        "leave it out of the plan")


def __getattr__(name: str) -> NoReturn:
    refuse(name, __name__)


__all__ = ["ApplyGradients", "TrainOneStep", "TrainTFMultiGPU", "UpdateTargetNetwork"]

"""Execution plans in the shape of RLlib's "How To Customize Policies" page (PPO's plan, and an
A3C-style plan swapped into PPO), written with rlmesh.execution's operators as an RLlib user
writes them with ``ray.rllib`` -> ``rlmesh`` (our own code, not the page's), and plans that go
wrong. Module level: runner processes import the classes' module by path."""

from __future__ import annotations

from rlmesh.agents.ppo import PPOTrainer
from rlmesh.execution.metric_ops import (StandardMetricsReporting, UpdateKL,
                                         warn_about_bad_reward_scales)
from rlmesh.execution.rollout_ops import (AsyncGradients, ConcatBatches, ParallelRollouts,
                                          SelectExperiences, StandardizeFields)
from rlmesh.execution.train_ops import ApplyGradients, TrainOneStep, TrainTFMultiGPU


def ppo_shaped_plan(workers, config):
    """Sample in rounds, keep the learning policies' steps, join rounds up to a train batch,
    standardize the advantages, train, check the KL, report."""
    batches = ParallelRollouts(workers, mode="bulk_sync")
    batches = batches.for_each(SelectExperiences(workers.trainable_policies()))
    batches = batches.combine(ConcatBatches(min_batch_size=config["train_batch_size"]))
    batches = batches.for_each(StandardizeFields(["advantages"]))
    if config["simple_optimizer"]:
        steps = batches.for_each(TrainOneStep(workers, num_sgd_iter=config["num_sgd_iter"],
                                              sgd_minibatch_size=config["sgd_minibatch_size"]))
    else:
        steps = batches.for_each(TrainTFMultiGPU(workers,
                                                 sgd_minibatch_size=config["sgd_minibatch_size"]))
    stats = steps.for_each(lambda step: step[1]).for_each(UpdateKL(workers))
    return StandardMetricsReporting(stats, workers, config).for_each(
        lambda result: warn_about_bad_reward_scales(config, result))


PlanPPOTrainer = PPOTrainer.with_updates(name="PlanPPOTrainer", execution_plan=ppo_shaped_plan)


def gradients_plan(workers, config):
    """A3C's flow: gradients computed on the runners, each applied as it comes, the new
    weights sent back to the runner that computed them only."""
    gradients = AsyncGradients(workers)
    applied = gradients.for_each(ApplyGradients(workers, update_all=False))
    return StandardMetricsReporting(applied, workers, config)


# As the page swaps it in: no new name (the class keeps PPO's).
AsyncGradientsPPO = PPOTrainer.with_updates(execution_plan=gradients_plan)


def as_they_come_plan(workers, config):
    """Each runner's fragment as it comes (mode="async"), joined into train batches."""
    batches = ParallelRollouts(workers, mode="async").combine(
        ConcatBatches(min_batch_size=config["train_batch_size"]))
    steps = batches.for_each(TrainOneStep(workers, num_sgd_iter=2, sgd_minibatch_size=100))
    return StandardMetricsReporting(steps, workers, config)


AsTheyComePPO = PPOTrainer.with_updates(name="AsTheyComePPO", execution_plan=as_they_come_plan)


def batches_only_plan(workers, config):
    """Forgets to train: its items are batches of experience, not results."""
    return ParallelRollouts(workers, mode="bulk_sync")


BatchesOnlyTrainer = PPOTrainer.with_updates(name="BatchesOnlyTrainer",
                                             execution_plan=batches_only_plan)

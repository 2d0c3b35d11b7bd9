"""The trained-nothing rule (driver/trained_nothing.py) over the results each family reports:
a run whose learner updated is never flagged, one whose counter stayed 0 well past the
config's first update is, once, in one line; algorithms that may train nothing by design
(a user's own iteration, policies_to_train a function) are left alone."""

from __future__ import annotations

import logging

import pytest

from rlmesh.driver.algorithm_registry import ALGORITHMS, get_config_class
from rlmesh.driver.trained_nothing import ASYNC_GRACE_S, TrainingWatch, first_update_due
from rlmesh.runtime.import_path import import_object


def algorithm(run: str, **settings):
    """The registered algorithm's class with its default config (no process is started)."""
    config = get_config_class(run)()
    for key, value in settings.items():
        setattr(config, key, value)
    algo = object.__new__(import_object(config.algorithm_path))
    algo.config = config
    return algo


def results(algo, trained_from: int | None, iterations: int = 8, seconds: float = 20.0):
    """Results as the family reports them: env steps sampled per iteration at the pace of
    its first update's due point, the trained counter > 0 from iteration ``trained_from``."""
    due, _ = first_update_due(algo.config)
    step = max(1, due // 2)
    counter = "num_learner_updates_total" if algo.config.algorithm_path.endswith(
        ("ApexDQN", "ApexDDPG")) else "num_env_steps_trained"
    for i in range(1, iterations + 1):
        trained = 0 if trained_from is None or i < trained_from else 64 * (i - trained_from + 1)
        yield {"training_iteration": i, "num_env_steps_sampled": step * i,
               "timesteps_total": step * i, "time_total_s": seconds * i,
               counter: trained, "num_env_steps_trained": trained}


@pytest.mark.parametrize("run", sorted(ALGORITHMS))
def test_a_run_whose_learner_updates_is_never_flagged(run):
    algo = algorithm(run)
    watch = TrainingWatch(algo)
    assert watch.active
    # Its first update comes late (at twice the due point: an asynchronous learner's
    # batch on its way), and a late one is not "nothing".
    for result in results(algo, trained_from=4):
        assert watch.observe(result) is None
    assert watch.reason is None


@pytest.mark.parametrize("run", sorted(ALGORITHMS))
def test_a_run_whose_learner_never_updates_is_flagged_once_in_one_line(run, caplog):
    algo = algorithm(run)
    watch = TrainingWatch(algo)
    with caplog.at_level(logging.WARNING, logger="rlmesh.driver.trained_nothing"):
        seen = [watch.observe(r) for r in results(algo, trained_from=None)]
    assert seen[-1] is not None and "\n" not in seen[-1]
    assert seen[-1].startswith("trained nothing: ")
    assert ("num_learner_updates_total is 0" if run.startswith("APEX")
            else "num_env_steps_trained is 0") in seen[-1]
    assert "num_steps_sampled_before_learning_starts" in seen[-1]
    # Not before the env steps are well past the first update's due point and an
    # iteration has passed there.
    assert seen[:4] == [None] * 4
    assert len([r for r in caplog.records if "trained nothing" in r.getMessage()]) == 1


def test_an_asynchronous_learner_gets_time_besides():
    algo = algorithm("IMPALA")
    watch = TrainingWatch(algo)
    seen = [watch.observe(r) for r in results(algo, None, iterations=12, seconds=5.0)]
    past = seen.index(next(s for s in seen if s))  # iteration index flagged
    assert 5.0 * (past + 1) - 5.0 * 4 >= ASYNC_GRACE_S  # due (x2) at iteration 4, then 30 s


def test_a_late_first_update_clears_the_verdict():
    algo = algorithm("PPO")
    watch = TrainingWatch(algo)
    for r in results(algo, trained_from=None, iterations=6):
        watch.observe(r)
    assert watch.reason is not None
    watch.observe({"training_iteration": 7, "num_env_steps_sampled": 10**6,
                   "num_env_steps_trained": 4000, "time_total_s": 200.0})
    assert watch.reason is None


def test_learning_starts_and_training_intensity_move_the_due_point():
    dqn = algorithm("DQN", num_steps_sampled_before_learning_starts=10_000,
                    train_batch_size=32, training_intensity=0.5)
    assert first_update_due(dqn.config)[0] == 10_000 + 64
    watch = TrainingWatch(dqn)
    assert watch.observe({"training_iteration": 9, "num_env_steps_sampled": 20_000,
                          "num_env_steps_trained": 0, "time_total_s": 90.0}) is None
    assert "training_intensity 0.5" in watch.settings


def test_algorithms_that_may_train_nothing_by_design_are_not_checked():
    from rlmesh.algorithms.ppo import PPO

    class MyAlgo(PPO):  # a user's own iteration
        def training_step(self):
            return {}

    algo = object.__new__(MyAlgo)
    algo.config = get_config_class("PPO")()
    assert not TrainingWatch(algo).active
    assert not TrainingWatch(algorithm("PPO", policies_to_train="pkg.mod:fn")).active
    assert not TrainingWatch(algorithm("PPO", policies_to_train=[])).active
    frozen = TrainingWatch(algorithm("PPO", policies_to_train=["p1"]))
    assert frozen.active and "policies_to_train ['p1']" in frozen.hint
    said = [frozen.observe(r) for r in results(algorithm("PPO"), None)]
    assert "check that policies_to_train ['p1'] get agents (policy_mapping_fn)" in said[-1]


def test_learner_statistics_of_an_update_count_as_training_and_skipped_batches_do_not():
    algo = algorithm("PPO")
    skipped = {"info": {"learner": {"default_policy": {"num_nonfinite_batches_skipped": 3}}}}
    watch = TrainingWatch(algo)
    assert [watch.observe({**r, **skipped}) for r in results(algo, None)][-1]
    # A user's policy whose own update() reports its loss but no num_env_steps_trained.
    said = {"info": {"learner": {"default_policy": {"loss": 0.3}}}}
    watch = TrainingWatch(algo)
    assert not any(watch.observe({**r, **said}) for r in results(algo, None))

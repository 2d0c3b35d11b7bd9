"""ASHA through Optuna's successive halving: a trial that reaches max_t, its last iteration,
has done its work and ends TERMINATED however the others compare; below max_t it is judged.
The order of reports is fixed here; in a sweep it is whichever trial reports first."""

from types import SimpleNamespace

import pytest

from rlmesh.tune.api import _max_t
from rlmesh.tune.search import Search


def _race(max_t):
    """Trial b passes rungs 1 and 3 alone, a (better everywhere) runs to 9, then b reaches 9.
    Returns b's prune verdict at each of its iterations."""
    search = Search({"q": 1}, num_samples=2, scheduler="asha", metric="score", seed=0,
                    grace_period=1, reduction_factor=3, max_t=max_t)
    a, b = (SimpleNamespace(optuna_number=search.config(i)[2], iteration=0) for i in range(2))
    verdicts = []

    def report(trial, value_per_step, steps):
        for step in steps:
            trial.iteration = step
            pruned = search.should_prune(trial, value_per_step * step)
            if trial is b:
                verdicts.append(pruned)

    report(b, 0.9, range(1, 4))
    report(a, 1.0, range(1, 10))
    report(b, 0.9, range(4, 10))
    return verdicts


def test_a_trial_at_max_t_is_not_pruned_but_below_it_is_judged():
    assert _race(max_t=None) == [False] * 8 + [True]  # the flake CI met: pruned at its end
    assert _race(max_t=9) == [False] * 9
    assert _race(max_t=20) == [False] * 8 + [True]


def test_max_t_becomes_the_stop_criterion_or_comes_from_it():
    stop = {"episode_reward_mean": 400}
    assert _max_t(9, stop) == 9 and stop["training_iteration"] == 9
    stop = {"training_iteration": 5}
    assert _max_t(9, stop) == 5 and stop == {"training_iteration": 5}
    assert _max_t(None, {"training_iteration": 7}) == 7
    assert _max_t(None, {"timesteps_total": 1000}) is None
    with pytest.raises(ValueError, match="max_t"):
        _max_t(0, {})

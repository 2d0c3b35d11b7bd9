"""The filter calls mixin (roles/obs_filters.py): a role serves the driver's filter sync
with whatever ``obs_filter`` it provides, an attribute or a property, and the sampling
roles serve those calls from the mixin alone."""

from __future__ import annotations

import numpy as np
import pytest

from rlmesh.rl.filters import MeanStdFilter
from rlmesh.roles.env_runner import EnvRunner
from rlmesh.roles.es_runner import ESRunner
from rlmesh.roles.obs_filters import FILTER_CALLS, ObsFilterCalls
from rlmesh.roles.policy_server import PolicyServerRunner


class OwnFilter(ObsFilterCalls):
    def __init__(self) -> None:
        self.obs_filter = MeanStdFilter((2,))


class Sampler:
    def __init__(self) -> None:
        self.obs_filter = MeanStdFilter((2,))


class SamplersFilter(ObsFilterCalls):
    """As EnvRunner: the filter belongs to its sampler, which may be replaced."""

    def __init__(self) -> None:
        self.sampler = Sampler()

    @property
    def obs_filter(self) -> MeanStdFilter:
        return self.sampler.obs_filter


@pytest.mark.parametrize("make", [OwnFilter, SamplersFilter])
def test_updates_are_flushed_once_and_the_global_state_taken(make):
    runner, driver = make(), MeanStdFilter((2,))
    runner.obs_filter(np.array([[1.0, 2.0], [3.0, 6.0]]))
    updates = runner.get_filter_updates()
    assert updates["n"] == 2
    np.testing.assert_allclose(updates["mean"], [2.0, 4.0])
    assert runner.get_filter_updates()["n"] == 0  # forgotten once handed over
    driver.merge_buffer(updates)
    driver(np.array([[5.0, 8.0]]))  # another runner's rows, already in the global filter
    runner.obs_filter(np.array([[7.0, 7.0]]))  # seen after the flush: kept on top
    runner.set_filter_state(driver.get_state())
    state = runner.get_filter_state()
    assert state["n"] == 4
    np.testing.assert_allclose(state["mean"], [4.0, 23 / 4])


def test_the_filter_is_read_at_each_call_not_captured():
    runner = SamplersFilter()
    runner.sampler = Sampler()  # a rebuilt sampler (a new policy, a restart)
    runner.sampler.obs_filter(np.ones((3, 2)))
    assert runner.get_filter_updates()["n"] == 3


@pytest.mark.parametrize("role", [EnvRunner, ESRunner, PolicyServerRunner])
def test_sampling_roles_serve_the_filter_calls_from_the_mixin(role):
    assert set(FILTER_CALLS) <= set(role.protocol.kinds())
    for name in FILTER_CALLS:
        assert getattr(role, name) is getattr(ObsFilterCalls, name), (role, name)

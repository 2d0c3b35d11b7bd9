"""An env slot's recovery (roles/env_slots.py): a failed reset is counted and retried on a
recreated env with a seed of its own, a broken env gives up after MAX_RESET_ATTEMPTS."""

from __future__ import annotations

import pytest

from rlmesh.roles.env_slots import MAX_RESET_ATTEMPTS, RESEED_STRIDE, EnvSlot


class Env:
    """Raises in its first ``fails`` resets (counted over all instances), then returns
    the seed it was reset with as its observation."""

    made: list["Env"] = []

    def __init__(self, fails: list[int]) -> None:
        self.fails, self.closed = fails, False
        Env.made.append(self)

    def reset(self, *, seed=None):
        if self.fails[0] > 0:
            self.fails[0] -= 1
            raise OSError("simulator down")
        return seed, {}

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("base_seed", [5, None])
def test_a_failed_reset_is_retried_on_a_recreated_reseeded_env(base_seed):
    fails = [2]
    Env.made = []
    slot = EnvSlot(Env(fails), base_seed)
    counters = {"env_errors": 0}
    obs, info = slot.reset_env(lambda i: Env(fails), 0, base_seed, counters)
    assert counters["env_errors"] == 2 and slot.restarts == 2
    assert obs == (None if base_seed is None else base_seed + 2 * RESEED_STRIDE)
    assert [e.closed for e in Env.made] == [True, True, False] and slot.env is Env.made[-1]
    assert slot.seed is None  # a seed is used once


def test_an_env_that_never_resets_raises_after_the_last_attempt():
    slot, counters = EnvSlot(Env([99]), 1), {"env_errors": 0}
    with pytest.raises(RuntimeError, match=f"failed to reset {MAX_RESET_ATTEMPTS} times"):
        slot.reset_env(lambda i: Env([99]), 3, 1, counters)
    assert counters["env_errors"] == MAX_RESET_ATTEMPTS

"""Restart decisions and heartbeat bookkeeping, without processes."""

from __future__ import annotations

import pytest

from rlmesh.runtime import RestartPolicy
from rlmesh.runtime.supervisor import Watch


def test_default_policy_never_restarts():
    assert RestartPolicy().delay(0) is None


def test_backoff_grows_geometrically_from_the_first_delay():
    p = RestartPolicy(max_restarts=5, backoff_s=0.5, backoff_max_s=100.0, multiplier=2.0)
    assert [p.delay(n) for n in range(5)] == [0.5, 1.0, 2.0, 4.0, 8.0]


def test_backoff_is_capped():
    p = RestartPolicy(max_restarts=20, backoff_s=1.0, backoff_max_s=10.0, multiplier=3.0)
    delays = [p.delay(n) for n in range(20)]
    assert delays[:3] == [1.0, 3.0, 9.0]
    assert delays[3:] == [10.0] * 17
    assert all(a <= b for a, b in zip(delays, delays[1:]))


def test_constant_backoff_with_multiplier_one():
    p = RestartPolicy(max_restarts=4, backoff_s=0.25, multiplier=1.0)
    assert [p.delay(n) for n in range(4)] == [0.25] * 4


def test_backoff_grows_with_failures_in_a_row_not_with_lifetime_restarts():
    p = RestartPolicy(max_restarts=10, backoff_s=0.5, multiplier=2.0)
    assert p.delay(7, failures_in_a_row=0) == 0.5  # seven old failures, then a healthy run
    assert p.delay(7, failures_in_a_row=2) == 2.0
    assert p.delay(10, failures_in_a_row=0) is None  # the lifetime limit still holds


def test_gives_up_after_max_restarts():
    p = RestartPolicy(max_restarts=3, backoff_s=0.1)
    assert [p.delay(n) is None for n in range(6)] == [False, False, False, True, True, True]


def test_many_restarts_stay_at_the_cap():
    p = RestartPolicy(max_restarts=10**6, backoff_s=0.5, backoff_max_s=30.0)
    assert p.delay(2000) == 30.0


def test_watch_is_due_for_a_ping_every_interval():
    w = Watch(interval=1.0, timeout=5.0, last_pong=100.0)
    assert w.due(100.0)  # never pinged yet
    w.last_ping = 100.0
    assert not w.due(100.5)
    assert w.due(101.0)
    assert w.due(150.0)


def test_watch_is_hung_only_after_timeout_without_pong():
    w = Watch(interval=1.0, timeout=5.0, last_pong=100.0)
    assert not w.hung(100.0)
    assert not w.hung(105.0)  # exactly the timeout: still alive
    assert w.hung(105.01)
    w.pong(105.0, {"loop": {"blocked": False}})
    assert not w.hung(109.9)
    assert w.hung(110.5)
    assert w.status == {"loop": {"blocked": False}}


def test_pings_without_pongs_do_not_count_as_alive():
    w = Watch(interval=1.0, timeout=3.0, last_pong=0.0)
    for t in range(1, 10):
        if w.due(float(t)):
            w.last_ping = float(t)
    assert w.hung(9.0)


def test_a_fresh_watch_starts_alive():
    import time

    w = Watch(interval=1.0, timeout=5.0)
    assert not w.hung(time.monotonic())

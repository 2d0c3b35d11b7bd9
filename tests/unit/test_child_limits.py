"""The supervisor's decisions beyond restarts, without processes: deaths within a window of a
child's work (DeathBudget), how a death is named (cause_of), and when a unit of work is slow
(WorkClock)."""

from __future__ import annotations

import time

from rlmesh.runtime.child_limits import DeathBudget, cause_of
from rlmesh.runtime.work_clock import WorkClock, slow_units
from rlmesh.runtime.work_counter import counter_path, shared_count, take_count


def test_deaths_close_together_use_up_the_budget_and_the_work_between_them_is_named():
    budget = DeathBudget(deaths=3, window=1000)
    spent = []
    for steps in (200, 300, 250):  # three lives, each ending in a death
        budget.add(steps)
        spent.append(budget.died())
    assert spent == [None, None, 750]


def test_deaths_spread_over_more_work_than_the_window_never_use_it_up():
    budget = DeathBudget(deaths=3, window=1000)
    for _ in range(20):  # a rare crash: restarted on, however often over a long run
        budget.report(600)
        assert budget.died() is None


def test_a_life_counts_the_larger_of_what_the_child_reported_and_its_owner_counted():
    budget = DeathBudget(deaths=2, window=10_000)
    budget.report(40)
    budget.add(500)  # the heartbeat's count was older than the fragments delivered
    budget.died()
    budget.report(900)
    budget.add(100)  # the owner never got what the child sampled before it died
    assert budget.died() == 1400


def test_no_budget_never_gives_up():
    budget = DeathBudget(deaths=0, window=10)
    budget.report(0)
    assert all(budget.died() is None for _ in range(50))


def test_a_child_whose_work_is_never_counted_is_not_judged_by_it():
    unmeasured = DeathBudget(deaths=2, window=10_000)  # no probe, no owner's count
    assert all(unmeasured.died() is None for _ in range(10))
    at_reset = DeathBudget(deaths=2, window=10_000)
    at_reset.report(0)  # counted, and 0: an env that crashes in reset()
    assert [at_reset.died(), at_reset.died()] == [None, 0]


def test_causes_are_the_signal_or_the_exit_code():
    assert [cause_of(-11), cause_of(-6), cause_of(3), cause_of(None)] == [
        "SIGSEGV", "SIGABRT", "exit code 3", "no exit code"]


def test_a_unit_far_past_its_median_is_reported_with_its_limit():
    clock = WorkClock("update", floor_s=0.05)
    for _ in range(4):  # the first is warm-up; the others set the median
        with clock:
            time.sleep(0.02)
    assert clock.probe() == {}  # nothing running
    with clock("update 5 of policy 'p'"):
        limit = clock.probe()["warn_after_s"]
        assert 5 * 0.02 <= limit < 5 * 0.2  # 5 x the median, above the floor
        probe = clock.probe()
    assert probe["work"] == "update 5 of policy 'p'" and probe["running_s"] < limit


def test_a_clock_without_a_floor_or_a_median_reports_nothing():
    never = WorkClock("update", floor_s=0)
    for _ in range(3):
        with never:
            pass
    with never:
        assert never.probe() == {}
    fresh = WorkClock("update", floor_s=1.0)
    with fresh:  # its first unit: no median yet
        assert fresh.probe() == {}


def test_a_slow_unit_is_reported_once_with_the_stack_command_for_its_process():
    probe = {"work": "update 9 of policy 'p'", "running_s": 12.0, "warn_after_s": 10.0,
             "median_s": 0.5}
    status = {"pid": 4321, "probes": {"learner-0": probe, "handles": {"x": 1}}}
    reported: set[str] = set()
    ((key, line),) = slow_units(status, reported)
    assert key == "learner-0"
    assert line == ("update 9 of policy 'p' has run 12.0 s (24x its median of 0.5 s): stuck? "
                    "`rlmesh stack --pid 4321` shows where it is")
    assert slow_units(status, reported) == []  # once per unit
    assert slow_units({"probes": {"learner-0": {**probe, "running_s": 9.0}}}, set()) == []


def test_a_shared_count_is_in_its_file_at_once_and_is_read_once(tmp_path):
    path = counter_path(tmp_path, "env_runner-1", "env_steps")
    path.parent.mkdir()
    count = shared_count(path)
    count[0] += 2300  # no flush, no close: a process killed now leaves this in the file
    assert take_count(path) == 2300
    assert take_count(path) is None  # removed: the next process's life starts from nothing
    assert shared_count(path)[0] == 0

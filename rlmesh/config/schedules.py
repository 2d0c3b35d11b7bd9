"""Piecewise-linear schedules in RLlib's format, ``[[timestep, value], ...]``, as used by
``lr_schedule``: checked once at validate(), then read with ``value_at``."""

from __future__ import annotations

import bisect
from numbers import Real


def validate_schedule(schedule) -> None:
    """Raise ValueError unless ``schedule`` is a non-empty list of ``[timestep, value]``
    pairs with integer timesteps >= 0 in non-decreasing order."""
    if not isinstance(schedule, (list, tuple)) or not schedule:
        raise ValueError(f"expected a non-empty list of [timestep, value] pairs, got {schedule!r}")
    previous = -1
    for point in schedule:
        if (
            not isinstance(point, (list, tuple))
            or len(point) != 2
            or not isinstance(point[0], int)
            or isinstance(point[0], bool)
            or not isinstance(point[1], Real)
            or isinstance(point[1], bool)
        ):
            raise ValueError(f"expected [int timestep, number value] pairs, got {point!r}")
        if point[0] < max(previous, 0):
            raise ValueError(f"timesteps must be >= 0 and non-decreasing, got {schedule!r}")
        previous = point[0]


def value_at(schedule, t: float) -> float:
    """The schedule's value at timestep ``t``: linear between points, the first value
    before the first point and the last value after the last one.

    Clamping before the first point differs from RLlib's old PiecewiseSchedule (which
    returned the last value there) but matches its new Scheduler, which requires the
    first point at 0 and so never asks.
    """
    steps = [p[0] for p in schedule]
    i = bisect.bisect_right(steps, t)
    if i == 0:
        return float(schedule[0][1])
    if i == len(schedule):
        return float(schedule[-1][1])
    (t0, v0), (t1, v1) = schedule[i - 1], schedule[i]
    # bisect_right puts equal timesteps left of i, so t1 > t0 here: no division by zero.
    return float(v0 + (t - t0) / (t1 - t0) * (v1 - v0))

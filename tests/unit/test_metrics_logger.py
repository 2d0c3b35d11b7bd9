"""MetricsLogger: each reduce kind, windows, EMA, clear_on_reduce, nested keys, and the merge
of many runners' loggers equal to one logger that saw every value."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from rlmesh.utils.metrics import (ALL_MODULES, ENV_RUNNER_RESULTS, EPISODE_RETURN_MEAN,
                                  LEARNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME,
                                  MetricsLogger)
from rlmesh.utils.metrics.metrics_logger import RunnerMetricsLogger


def test_rllib_key_names():
    assert (ENV_RUNNER_RESULTS, LEARNER_RESULTS, ALL_MODULES) == (
        "env_runners", "learners", "__all_modules__")
    assert EPISODE_RETURN_MEAN == "episode_return_mean"
    assert NUM_ENV_STEPS_SAMPLED_LIFETIME == "num_env_steps_sampled_lifetime"


def test_reduce_kinds_and_windows():
    m = MetricsLogger()
    for v in [5, 1, 3, 8, 2]:
        m.log_value("mean3", v, window=3)
        m.log_value("min", v, reduce="min")
        m.log_value("max2", v, reduce="max", window=2)
        m.log_value("sum", v, reduce="sum")
        m.log_value("sum2", v, reduce="sum", window=2)
        m.log_value("all", v, reduce=None)
    assert m.peek("mean3") == pytest.approx((3 + 8 + 2) / 3)
    assert m.peek("min") == 1 and m.peek("max2") == 8
    assert m.peek("sum") == 19 and m.peek("sum2") == 10
    assert m.peek("all") == [5, 1, 3, 8, 2]
    # a window keeps only its last values, however many were logged
    for v in range(1000):
        m.log_value("mean3", v, window=3)
    assert m.peek("mean3") == 998 and len(m.stats[("mean3",)].values) <= 6


def test_ema_default_and_clear_on_reduce():
    m = MetricsLogger()
    m.log_value("loss", 1.0)  # a mean without window: EMA with 0.01, as RLlib
    m.log_value("loss", 2.0)
    assert m.peek("loss") == pytest.approx(0.99 * 1.0 + 0.01 * 2.0)
    m.log_value("fast", 1.0, ema_coeff=0.5)
    m.log_value("fast", 3.0)
    assert m.peek("fast") == 2.0
    m.log_value("per_iter", 4, reduce="sum", clear_on_reduce=True)
    assert m.reduce()["per_iter"] == 4
    assert m.reduce()["per_iter"] == 0  # started afresh
    with pytest.raises(ValueError, match="reduce"):
        m.log_value("bad", 1, reduce="median")
    with pytest.raises(ValueError, match="window"):
        m.log_value("bad2", 1, window=0)
    with pytest.raises(ValueError, match="ema_coeff"):
        m.log_value("bad3", 1, reduce="sum", ema_coeff=0.1)


def test_nested_keys_log_dict_peek_and_delete():
    m = MetricsLogger()
    m.log_value(("learners", "p0", "loss"), 1.0, window=1)
    m.log_dict({"p1": {"loss": 3.0, "kl": 0.5}}, key="learners", window=1)
    m.log_value("x", np.float32(2.5), window=1)  # numpy scalars become Python numbers
    assert m.peek(("learners", "p1", "loss")) == 3.0
    assert m.peek("learners") == {"p0": {"loss": 1.0}, "p1": {"loss": 3.0, "kl": 0.5}}
    assert type(m.peek("x")) is float
    assert m.peek("nope", default=7) == 7
    with pytest.raises(KeyError, match="nope"):
        m.peek("nope")
    assert ("learners", "p1") in m
    m.delete("learners", "p1")
    assert m.reduce() == {"learners": {"p0": {"loss": 1.0}}, "x": 2.5}
    with pytest.raises(KeyError, match="prefix"):
        m.log_value(("x", "y"), 1.0)
    with pytest.raises(TypeError, match="key"):
        m.log_value(3, 1.0)


def test_log_time_logs_a_duration():
    m = MetricsLogger()
    with m.log_time("block_s", window=1):
        time.sleep(0.001)
    assert m.peek("block_s") > 0


def test_merge_of_many_loggers_equals_one_that_saw_all_values():
    rng = np.random.default_rng(0)
    runners = [MetricsLogger(track_pending=True) for _ in range(3)]
    driver, reference = MetricsLogger(), MetricsLogger()
    kinds = {"m": dict(window=40), "lo": dict(reduce="min", window=40),
             "hi": dict(reduce="max"), "n": dict(reduce="sum"),
             "e": dict(ema_coeff=0.1), "l": dict(reduce=None, clear_on_reduce=True)}
    for round_ in range(4):
        batches = []
        for r in runners:
            k = int(rng.integers(1, 8))
            values = rng.normal(size=k).tolist()
            for v in values:
                for key, settings in kinds.items():
                    r.log_value(key, v, **settings)
            batches.append(values)
        # the driver merges each runner's new values in turn; the reference saw them so
        for values in batches:
            for v in values:
                for key, settings in kinds.items():
                    reference.log_value(key, v, **settings)
        driver.merge_and_log_n_dicts([r.pending_state() for r in runners])
        got, want = driver.reduce(), reference.reduce()
        assert got.keys() == want.keys()
        for key in want:
            assert got[key] == pytest.approx(want[key]), (round_, key)
    # a mean over a window is a mean over values, not a mean of the runners' means
    a, b, d = MetricsLogger(True), MetricsLogger(True), MetricsLogger()
    a.log_value("m", 0.0, window=10)
    for _ in range(3):
        b.log_value("m", 4.0, window=10)
    d.merge_and_log_n_dicts([a.pending_state(), b.pending_state()])
    assert d.peek("m") == 3.0
    assert a.pending_state() == {}  # handed over once


def test_pending_state_is_plain_data_and_state_round_trips():
    import msgpack

    m = MetricsLogger(track_pending=True)
    m.log_value(("a", "b"), 1.5, window=5)
    m.log_value("n", 2, reduce="sum")
    m.log_value("n", 3, reduce="sum")
    state = m.pending_state()
    assert msgpack.unpackb(msgpack.packb(state)) == state
    assert state["items"][1][2] == [5]  # a running sum ships its sum only
    copy = MetricsLogger()
    copy.set_state(m.get_state())
    assert copy.reduce() == m.reduce() == {"a": {"b": 1.5}, "n": 5}
    assert math.isnan(MetricsLogger().peek("x", default=float("nan")))


def test_runner_logger_called_gives_the_counters():
    m = RunnerMetricsLogger(lambda: {"num_env_steps_sampled": 3})
    m.log_value("x", 1.0)
    assert m() == {"num_env_steps_sampled": 3} and m.peek("x") == 1.0

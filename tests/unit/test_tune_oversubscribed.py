"""The sweep's placement of trials bigger than the machine (function trainables on threads,
a 2-CPU node): they run one at a time with one warning; a resource the machine lacks
altogether (a GPU) still refuses the trial."""

from __future__ import annotations

import threading
import time

import pytest

from rlmesh import tune
from rlmesh.placement.scheduler import Node

SPANS: list[tuple[float, float]] = []
_LOCK = threading.Lock()


def trainable(config):
    start = time.monotonic()
    time.sleep(0.05)
    tune.report({"score": config["x"]})
    with _LOCK:
        SPANS.append((start, time.monotonic()))


def _run(tmp_path, resources, xs=(1, 2, 3)):
    return tune.run(trainable, config={"x": tune.grid_search(list(xs))},
                    stop={"training_iteration": 1}, metric="score",
                    resources_per_trial=resources, nodes=[Node("local", {"CPU": 2})],
                    storage_path=str(tmp_path), name="big", print_every_s=1000)


def test_trials_bigger_than_the_machine_run_alone_after_one_warning(tmp_path, capsys):
    SPANS.clear()
    analysis = _run(tmp_path, {"CPU": 8})
    out = "".join(capsys.readouterr())
    assert [t.status for t in analysis.trials] == ["TERMINATED"] * 3
    assert out.count("asks for 8 CPUs and this machine has 2: it runs oversubscribed") == 1, out
    assert out.count("(CPU 2, oversubscribed); 1 running") == 3, out
    spans = sorted(SPANS)
    assert all(b[0] >= a[1] for a, b in zip(spans, spans[1:])), spans  # never two at once


def test_trials_that_fit_still_run_side_by_side(tmp_path, capsys):
    analysis = _run(tmp_path, {"CPU": 1}, xs=(1, 2))
    out = "".join(capsys.readouterr())
    assert [t.status for t in analysis.trials] == ["TERMINATED"] * 2
    assert "runs oversubscribed" not in out and "(CPU 1); 2 running" in out, out


def test_a_resource_the_machine_lacks_still_refuses_the_trial(tmp_path):
    with pytest.raises(RuntimeError, match="cannot be placed even on an idle machine.*GPU"):
        _run(tmp_path, {"CPU": 1, "GPU": 1})

"""The sweep machinery on cheap function trainables (tune_trainables.py): an interrupted
sweep resumes without rerunning finished trials, ASHA stops bad trials early, PBT copies a
checkpoint from a good trial to a bad one, and the plain grid ranks trials right."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rlmesh import tune
from rlmesh.tune.trial import read_results

COUNTER = "tests.integration.tune_trainables:counter"


def _state(exp: Path) -> dict:
    return json.loads((exp / "experiment_state.json").read_text())


def test_interrupted_sweep_resumes_without_rerunning_finished_trials(tmp_path):
    exp = tmp_path / "resumable"
    cmd = [sys.executable, "-m", "tests.integration.tune_sweep_script", str(tmp_path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # two finished, the next two under way
            if (exp / "experiment_state.json").exists():
                trials = _state(exp)["trials"]
                if (sum(t["status"] == "TERMINATED" for t in trials) == 2
                        and sum(t["status"] == "RUNNING" and t["iteration"] >= 2 for t in trials) == 2):
                    break
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, out
    trials = _state(exp)["trials"]
    done = [t for t in trials if t["status"] == "TERMINATED"]
    cut = [t for t in trials if t["status"] == "PENDING" and t["restore_from"]]
    assert len(done) == 2 and len(cut) == 2, trials
    before = {t["trial_id"]: Path(t["dir"], "result.json").read_text() for t in done}

    resumed = subprocess.run([*cmd, "resume"], capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    placed = sorted(line.split()[1] for line in resumed.stdout.splitlines()
                    if line.startswith("scheduler:") and " placed on " in line)
    assert placed == sorted(t["trial_id"] for t in cut), resumed.stdout
    trials = _state(exp)["trials"]
    assert [t["status"] for t in trials] == ["TERMINATED"] * 4
    for t in trials:
        results = read_results(t["dir"])
        assert [r["training_iteration"] for r in results] == list(range(1, 9)), t["trial_id"]
        assert results[-1]["score"] == t["config"]["quality"] * 8
        if t["trial_id"] in before:  # not run again: its results are as they were
            assert Path(t["dir"], "result.json").read_text() == before[t["trial_id"]]
    for t in cut:  # went on from its last checkpoint, not from the start
        results = read_results(t["dir"])
        step = int(Path(t["restore_from"]).name.split("_")[1])
        assert results[step]["restored_from"] == t["restore_from"], results[step]


def test_asha_stops_bad_trials_early(tmp_path):
    qualities = [1.0, 0.9, 0.2, 0.1, 0.15, 0.05]
    analysis = tune.run(COUNTER, config={"quality": tune.grid_search(qualities),
                                         "iterations": 9, "sleep": 0.02},
                        metric="score", scheduler="asha", grace_period=1, reduction_factor=3,
                        max_t=9, max_concurrent_trials=2, local_dir=str(tmp_path), name="asha",
                        seed=0)
    by_quality = {t.config["quality"]: t for t in analysis.trials}
    best = by_quality[1.0]
    assert best.status == "TERMINATED" and best.iteration == 9
    pruned = [t for t in analysis.trials if t.status == "PRUNED"]
    assert len(pruned) >= 3, [(t.config["quality"], t.status, t.iteration) for t in analysis.trials]
    assert all(t.iteration < 9 and t.config["quality"] < 1.0 for t in pruned)
    assert analysis.best_config["quality"] == 1.0
    state = _state(tmp_path / "asha")
    assert sorted(t["status"] for t in state["trials"]).count("PRUNED") == len(pruned)


def test_pbt_copies_a_checkpoint_between_trials(tmp_path, capsys):
    pbt = tune.PopulationBasedTraining(perturbation_interval=2,
                                       hyperparam_mutations={"quality": [0.1, 0.2, 1.0, 2.0]},
                                       quantile_fraction=0.25, seed=0)
    analysis = tune.run(COUNTER, config={"quality": tune.grid_search([0.1, 0.2, 1.0, 2.0]),
                                         "iterations": 8, "sleep": 0.05},
                        metric="score", scheduler=pbt, resources_per_trial={"CPU": 0.5},
                        local_dir=str(tmp_path), name="pbt")
    out = capsys.readouterr().out
    assert "copies the checkpoint of" in out, out
    copies = sorted(tmp_path.glob("pbt/*/checkpoint_*_from_*"))
    assert copies, out
    copy = copies[0]
    donor_id = copy.name.split("_from_")[1]
    donor = next(t for t in analysis.trials if t.trial_id == donor_id)
    original = Path(donor.dir) / copy.name.split("_from_")[0]
    assert json.loads((copy / "state.json").read_text()) == \
        json.loads((original / "state.json").read_text())
    # The trial that took it went on from the copy: its next result says so.
    taker = next(t for t in analysis.trials if Path(t.dir) == copy.parent)
    assert any(r.get("restored_from") == str(copy) for r in read_results(taker.dir))
    assert all(t.status == "TERMINATED" for t in analysis.trials)


def test_function_grid_best_config_and_search_spaces(tmp_path):
    analysis = tune.Tuner(
        "tests.integration.tune_trainables:quadratic",
        param_space={"x": tune.grid_search([1, 2, 3, 4]), "iterations": 2,
                     "noise": tune.uniform(0, 1e-9), "tag": tune.choice(["a", "b"])},
        tune_config=tune.TuneConfig(metric="score", mode="max", num_samples=2, seed=1),
        run_config=tune.RunConfig(name="grid", storage_path=str(tmp_path), verbose=0)).fit()
    assert len(analysis.trials) == 8
    assert analysis.best_config["x"] == 3 and analysis.best_result["score"] == 0.01
    rows = analysis.table()
    assert rows[0]["x"] == 3 and [r["score"] for r in rows] == sorted(
        (r["score"] for r in rows), reverse=True)
    assert {t.config["tag"] for t in analysis.trials} <= {"a", "b"}
    assert all(0 <= t.config["noise"] <= 1e-9 for t in analysis.trials)
    assert os.path.isdir(analysis.trials[0].dir)

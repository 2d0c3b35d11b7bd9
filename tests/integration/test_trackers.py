"""`rlmesh train` logging to the trackers, with no network: W&B offline, MLflow on a local
file store; a sweep of two trials; an unreachable MLflow server costs one warning only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_trackers import read_wandb_run


@pytest.fixture(autouse=True)
def _mlflow_file_store(monkeypatch):
    """MLflow 3 opens a file store only when asked (the tracker asks for the run; the
    client reading it back here must too)."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")

RLMESH = [sys.executable, "-m", "rlmesh.cli.main", "train"]
SMALL = ["--run", "PPO", "--env", "CartPole-v1", "--stop", '{"training_iteration": 3}',
         "--config", '{"train_batch_size": 400, "minibatch_size": 100, "num_epochs": 1, '
                     '"num_env_runners": 1}']


def _train(tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    run = subprocess.run([*RLMESH, *args, "--local-dir", str(tmp_path / "results")],
                         capture_output=True, text=True, timeout=240, cwd=tmp_path,
                         env={**os.environ, **(env or {})})
    assert run.returncode == 0, run.stdout + run.stderr
    return run


def _trial_dirs(tmp_path: Path, experiment: str) -> list[Path]:
    return sorted(p for p in (tmp_path / "results" / experiment).iterdir()
                  if p.is_dir() and p.name.startswith("PPO_"))


def test_wandb_offline_run_logs_every_iteration_the_config_and_the_checkpoint(tmp_path):
    _train(tmp_path, *SMALL, "--experiment-name", "wb", "--checkpoint-at-end",
           "--wandb-project", "rlmesh-test", "--wandb-upload-checkpoints",
           env={"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true"})
    (trial,) = _trial_dirs(tmp_path, "wb")
    run = read_wandb_run(trial)
    assert run["group"] == "wb" and run["name"] == trial.name
    assert run["config"]["train_batch_size"] == 400 and run["config"]["env"] == "CartPole-v1"
    iterations = [h["training_iteration"] for h in run["history"] if "training_iteration" in h]
    assert iterations == [1, 2, 3]
    assert all(h["env_runners/episode_return_mean"] > 0 for h in run["history"]
               if "training_iteration" in h)
    ((kind, files),) = run["artifacts"]
    assert kind == "model" and "rlmesh_checkpoint.msgpack" in files


def test_mlflow_file_store_run_logs_metrics_params_and_checkpoint(tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"file://{tmp_path}/mlruns"
    _train(tmp_path, *SMALL, "--experiment-name", "mf", "--checkpoint-at-end",
           "--mlflow-tracking-uri", uri, "--mlflow-save-artifact")
    (trial,) = _trial_dirs(tmp_path, "mf")
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("mf").experiment_id])
    assert run.data.tags["mlflow.runName"] == trial.name and run.info.status == "FINISHED"
    assert run.data.params["train_batch_size"] == "400"
    history = client.get_metric_history(run.info.run_id, "timesteps_total")
    assert [(m.step, m.value) for m in history] == [(1, 400.0), (2, 800.0), (3, 1200.0)]
    names = [a.path for a in client.list_artifacts(run.info.run_id, "checkpoint_000003")]
    assert "checkpoint_000003/rlmesh_checkpoint.msgpack" in names


def test_a_sweep_logs_one_mlflow_run_per_trial_from_the_file(tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"file://{tmp_path}/mlruns"
    (tmp_path / "sweep.yaml").write_text(f"""\
sw:
  run: PPO
  env: CartPole-v1
  stop: {{training_iteration: 2}}
  config:
    train_batch_size: 400
    minibatch_size: 100
    num_epochs: 1
    num_env_runners: 1
    lr: {{grid_search: [0.001, 0.0005]}}
  callbacks:
    - MLflowLoggerCallback: {{tracking_uri: "{uri}", experiment_name: sweep_runs}}
""")
    _train(tmp_path, "-f", str(tmp_path / "sweep.yaml"), "--max-concurrent-trials", "1")
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("sweep_runs").experiment_id])
    assert sorted(r.data.params["lr"] for r in runs) == ["0.0005", "0.001"]
    assert {r.data.tags["rlmesh.experiment"] for r in runs} == {"sw"}
    assert len({r.data.tags["mlflow.runName"] for r in runs}) == 2
    for run in runs:
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "timesteps_total")]
        assert steps == [1, 2]


def test_an_unreachable_mlflow_server_costs_one_warning_not_the_run(tmp_path):
    run = _train(tmp_path, *SMALL, "--experiment-name", "down",
                 "--mlflow-tracking-uri", "http://127.0.0.1:9")
    warnings = [line for line in (run.stdout + run.stderr).splitlines() if "WARNING" in line]
    assert len(warnings) == 1, warnings
    assert "MLflow tracking stopped" in warnings[0] and "training goes on" in warnings[0]
    assert "stopped: training_iteration = 3 >= 3" in run.stdout


def test_bad_tracker_input_is_one_line(tmp_path):
    (tmp_path / "bad.yaml").write_text("run: PPO\nenv: CartPole-v1\n"
                                       "trackers: {mlflow: {tracking_url: http://x}}\n")
    run = subprocess.run([*RLMESH, "-f", str(tmp_path / "bad.yaml")], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        f"rlmesh train: error: {tmp_path / 'bad.yaml'}: trackers: unknown mlflow option "
        "'tracking_url'; did you mean 'tracking_uri'?"]

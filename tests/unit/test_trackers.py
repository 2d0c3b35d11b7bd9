"""The experiment trackers (rlmesh/tune/trackers.py) with the real packages and no network:
W&B offline (its run file read back), MLflow on a local file store (read with MlflowClient)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
import sys
import time
from pathlib import Path

import pytest

from rlmesh.extras import MissingExtra
from rlmesh.results import ResultLogger
from rlmesh.tune.integration.mlflow import MLflowLoggerCallback
from rlmesh.tune.integration.wandb import WandbLoggerCallback
from rlmesh.tune.trackers import TrackedLogger, TrackerError, normalize, require_packages

CONFIG = {"lr": 0.001, "model": {"fcnet_hiddens": [8, 8]}, "env": "CartPole-v1"}


def read_wandb_run(root: Path, timeout: float = 30.0) -> dict:
    """What a W&B offline run under ``root`` logged: {"config", "history", "artifacts",
    "group", "name"}. The run-*.wandb file is a LevelDB-style log (32 KiB blocks of records
    with a 7-byte header: crc, length, type) of wandb's protobuf Records, after a 7-byte
    file header; wandb 0.2x writes no wandb-summary.json in offline mode. wandb-core writes
    the file after ``run.finish()`` has returned (under load the file still held only its
    header then), so this reads it until the run's last record, its exit, is there."""
    deadline = time.monotonic() + timeout
    while True:
        records = _wandb_records(next(root.rglob("offline-run-*/run-*.wandb")).read_bytes())
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            break
        assert time.monotonic() < deadline, f"no exit record in the W&B run file in {timeout} s"
        time.sleep(0.1)
    out = {"config": {}, "history": [], "artifacts": [], "group": None, "name": None}
    for record in records:
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out["group"], out["name"] = record.run.run_group, record.run.display_name
            out["config"].update({u.key: json.loads(u.value_json)
                                  for u in record.run.config.update})
        elif kind == "history":
            out["history"].append({"/".join(i.nested_key) or i.key: json.loads(i.value_json)
                                   for i in record.history.item})
        elif kind == "artifact":
            out["artifacts"].append((record.artifact.type,
                                     [e.path for e in record.artifact.manifest.contents]))
    return out


def _wandb_records(data: bytes) -> list:
    """The whole protobuf Records of a run file's bytes (a record cut short is left out)."""
    from wandb.proto import wandb_internal_pb2 as pb

    pos, records, chunk = 7, [], b""
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a header is padding
            pos += 32768 - pos % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if (kind == 0 and length == 0) or pos + 7 + length > len(data):
            break  # the end, or a record still being written
        chunk += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST: a whole record
            record = pb.Record()
            record.ParseFromString(chunk)
            records.append(record)
            chunk = b""
    return records


def _results(n: int = 3):
    for i in range(1, n + 1):
        yield {"training_iteration": i, "timesteps_total": 100 * i, "done": False,
               "env_runners": {"episode_return_mean": 10.0 * i, "hist": [1, 2]},
               "info": {"learner": {"default_policy": {"kl": 0.01 * i}}}, "note": "text",
               "config": CONFIG}


def _checkpoint(tmp_path: Path) -> Path:
    ckpt = tmp_path / "trial" / "checkpoint_000002"
    ckpt.mkdir(parents=True)
    (ckpt / "rlmesh_checkpoint.msgpack").write_bytes(b"\x80")
    return ckpt


def test_wandb_offline_logs_results_config_and_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    ckpt = _checkpoint(tmp_path)
    with TrackedLogger(ResultLogger(tmp_path / "trial", CONFIG, tensorboard=False),
                       {"wandb": {"project": "p", "upload_checkpoints": True}}, "trial_a",
                       "exp", CONFIG, tmp_path / "trial") as logger:
        for result in _results():
            logger.log(result)
        logger.checkpoint(str(ckpt), 2)
    run = read_wandb_run(tmp_path / "trial")
    assert (run["group"], run["name"]) == ("exp", "trial_a")
    assert run["config"]["lr"] == 0.001 and run["config"]["model"] == {"fcnet_hiddens": [8, 8]}
    returns = [h["env_runners/episode_return_mean"] for h in run["history"]
               if "env_runners/episode_return_mean" in h]
    assert returns == [10.0, 20.0, 30.0]
    assert all("note" not in h and "done" in h for h in run["history"] if "training_iteration" in h)
    assert run["history"][-1]["info/learner/default_policy/kl"] == pytest.approx(0.03)
    assert run["artifacts"] == [("model", ["rlmesh_checkpoint.msgpack"])]
    assert len((tmp_path / "trial" / "result.json").read_text().splitlines()) == 3


def _mlflow_run(uri: str, experiment: str):
    from mlflow.tracking import MlflowClient

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # as the tracker does

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    (run,) = client.search_runs([exp.experiment_id])
    return client, run


def test_mlflow_file_store_logs_metrics_params_and_artifacts(tmp_path):
    uri = f"file://{tmp_path}/mlruns"
    ckpt = _checkpoint(tmp_path)
    options = {"tracking_uri": uri, "save_artifact": True, "tags": {"who": "test"}}
    with TrackedLogger(ResultLogger(tmp_path / "trial", CONFIG, tensorboard=False),
                       {"mlflow": options}, "trial_b", "exp_b", CONFIG, tmp_path / "trial") as lg:
        for result in _results():
            lg.log(result)
        lg.checkpoint(str(ckpt), 2)
    client, run = _mlflow_run(uri, "exp_b")
    assert run.data.tags["mlflow.runName"] == "trial_b" and run.data.tags["who"] == "test"
    assert run.data.params["lr"] == "0.001" and run.data.params["model/fcnet_hiddens"] == "[8, 8]"
    history = client.get_metric_history(run.info.run_id, "env_runners/episode_return_mean")
    assert [(m.step, m.value) for m in history] == [(1, 10.0), (2, 20.0), (3, 30.0)]
    assert "note" not in run.data.metrics
    assert [a.path for a in client.list_artifacts(run.info.run_id, "checkpoint_000002")] == \
        ["checkpoint_000002/rlmesh_checkpoint.msgpack"]
    assert run.info.status == "FINISHED"


def test_a_tracker_failing_mid_run_costs_one_warning(tmp_path, caplog):
    store = tmp_path / "mlruns"
    logger = TrackedLogger(ResultLogger(tmp_path / "trial", CONFIG, tensorboard=False),
                           {"mlflow": {"tracking_uri": f"file://{store}"}}, "t", "e", CONFIG,
                           tmp_path / "trial")
    results = list(_results(4))
    logger.log(results[0])
    logger.wait()  # the first result reached the store
    assert (store / "0").is_dir() or any(store.iterdir())
    with caplog.at_level(logging.WARNING, logger="rlmesh.tune.trackers"):
        shutil.rmtree(store)
        store.write_text("the server is gone")  # every later write fails
        for result in results[1:]:
            logger.log(result)
        logger.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith("MLflow tracking stopped")
    assert len((tmp_path / "trial" / "result.json").read_text().splitlines()) == 4


def test_options_and_names():
    assert normalize([WandbLoggerCallback(project="p", log_config=False),
                      MLflowLoggerCallback(tracking_uri="file:///x", experiment_name="n")]) == \
        {"wandb": {"project": "p", "log_config": False},
         "mlflow": {"tracking_uri": "file:///x", "experiment_name": "n"}}
    assert normalize({"WandbLoggerCallback": {"group": "g"}}) == {"wandb": {"group": "g"}}
    with pytest.raises(TrackerError, match="unknown mlflow option 'tracking_url'; did you mean "
                                           "'tracking_uri'"):
        MLflowLoggerCallback(tracking_url="http://x")
    with pytest.raises(TrackerError, match="unknown tracker 'wanb'; did you mean 'wandb'"):
        normalize({"wanb": {}})
    assert "api_key='***'" in repr(WandbLoggerCallback(api_key="secret"))


def test_a_missing_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if not installed
    with pytest.raises(MissingExtra) as e:
        require_packages({"mlflow": {}})
    assert str(e.value) == "MLflow tracking needs the mlflow package: pip install 'rlmesh[mlflow]'"


def test_evaluation_videos_reach_both_trackers(tmp_path, monkeypatch):
    import imageio.v2 as imageio
    import numpy as np

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    video = tmp_path / "episode.mp4"
    with imageio.get_writer(video, fps=10) as writer:
        for i in range(10):
            writer.append_data(np.full((64, 64, 3), 20 * i, np.uint8))
    uri = f"file://{tmp_path}/mlruns"
    with TrackedLogger(ResultLogger(tmp_path / "trial", {}, tensorboard=False),
                       {"wandb": {"project": "p"}, "mlflow": {"tracking_uri": uri}}, "t", "e",
                       {}, tmp_path / "trial") as logger:
        logger.log({"training_iteration": 1,
                    "evaluation": {"episode_reward_mean": 5.0, "videos": [str(video)]}})
    (entry,) = read_wandb_run(tmp_path / "trial")["history"]
    assert entry["evaluation/video/_type"] == "video-file"
    assert any((tmp_path / "trial" / "wandb").rglob(Path(entry["evaluation/video/path"]).name))
    client, run = _mlflow_run(uri, "e")
    assert [a.path for a in client.list_artifacts(run.info.run_id, "videos")] == \
        ["videos/episode.mp4"]

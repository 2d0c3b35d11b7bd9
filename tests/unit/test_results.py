"""ResultLogger: the trial directory Tune's tools read (params.json, result.json,
progress.csv, TensorBoard events), non-finite and numpy values, the growing CSV header."""

from __future__ import annotations

import csv
import json
import math
import struct

import numpy as np
import pytest

from rlmesh.results import (DEFAULT_LOCAL_DIR, ResultLogger, default_experiment_name, flatten,
                            make_trial_dir, safe_name, to_jsonable)


def result(iteration: int, **extra) -> dict:
    """A result shaped like Algorithm.train()'s."""
    return {
        "training_iteration": iteration,
        "timesteps_total": 4000 * iteration,
        "episode_reward_mean": 20.0 * iteration,
        "episodes_this_iter": 10,
        "time_this_iter_s": 0.5,
        "info": {"learner": {"default_policy": {"policy_loss": -0.01 * iteration,
                                                "vf_loss": 1.5, "cur_lr": 3e-4}}},
        "custom_metrics": {},
        **extra,
    }


def strict_json(line: str):
    """json.loads that refuses NaN and Infinity, as every non-Python JSON parser does."""
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")
    return json.loads(line, parse_constant=refuse)


def read_csv(path):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return reader.fieldnames, list(reader)


# --- a minimal TFRecord reader, independent of the writer: TensorBoard's framing is
# [u64 length][u32 masked crc32c(length)][data][u32 masked crc32c(data)] ---

def _crc32c_table():
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def masked_crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_records(path) -> list[bytes]:
    data, records, pos = path.read_bytes(), [], 0
    while pos < len(data):
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        assert header_crc == masked_crc32c(header), "corrupt length field"
        body = data[pos + 12:pos + 12 + length]
        (body_crc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        assert body_crc == masked_crc32c(body), "corrupt record"
        records.append(body)
        pos += 16 + length
    return records


def tb_scalars(trial_dir) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] of every scalar in the trial's event file."""
    from tensorboardX.proto import event_pb2

    files = list(trial_dir.glob("events.out.tfevents.*"))
    assert len(files) == 1
    out: dict[str, list] = {}
    for record in read_records(files[0]):
        event = event_pb2.Event.FromString(record)
        for value in event.summary.value:
            out.setdefault(value.tag, []).append((event.step, value.simple_value))
    return out


# --- tests ---

def test_writes_params_json_lines_csv_and_tensorboard(tmp_path):
    config = {"env": "CartPole-v1", "lambda": 0.95, "model": {"fcnet_hiddens": [64, 64]}}
    with ResultLogger(tmp_path, config) as logger:
        for i in (1, 2, 3):
            logger.log(result(i))
    assert json.loads((tmp_path / "params.json").read_text()) == config

    lines = (tmp_path / "result.json").read_text().splitlines()
    assert len(lines) == 3
    parsed = [strict_json(line) for line in lines]
    assert parsed[2]["info"]["learner"]["default_policy"]["policy_loss"] == pytest.approx(-0.03)
    assert parsed[0]["custom_metrics"] == {}  # nested dicts kept as they are

    header, rows = read_csv(tmp_path / "progress.csv")
    assert "info/learner/default_policy/policy_loss" in header
    assert "custom_metrics" not in header  # an empty dict has no column
    assert [int(r["training_iteration"]) for r in rows] == [1, 2, 3]
    assert float(rows[1]["info/learner/default_policy/vf_loss"]) == 1.5

    scalars = tb_scalars(tmp_path)
    assert scalars["ray/tune/episode_reward_mean"] == [(4000, 20.0), (8000, 40.0), (12000, 60.0)]
    assert [s for s, _ in scalars["ray/tune/info/learner/default_policy/cur_lr"]] == [4000, 8000,
                                                                                      12000]


def test_nan_and_inf_keep_json_strict_and_stay_out_of_tensorboard(tmp_path):
    with ResultLogger(tmp_path, {"lr": float("nan")}) as logger:
        logger.log(result(1, episode_reward_mean=float("nan"), episode_reward_max=float("inf"),
                          episode_reward_min=np.float32("-inf"),
                          hist_stats={"episode_reward": [1.0, float("nan")]}))
    line = strict_json((tmp_path / "result.json").read_text().splitlines()[0])
    assert line["episode_reward_mean"] is None
    assert line["episode_reward_max"] is None and line["episode_reward_min"] is None
    assert line["hist_stats"]["episode_reward"] == [1.0, None]
    assert strict_json((tmp_path / "params.json").read_text()) == {"lr": None}

    _, rows = read_csv(tmp_path / "progress.csv")
    assert rows[0]["episode_reward_max"] == "inf" and rows[0]["episode_reward_min"] == "-inf"
    assert math.isnan(float(rows[0]["episode_reward_mean"]))
    assert json.loads(rows[0]["hist_stats/episode_reward"]) == [1.0, None]

    scalars = tb_scalars(tmp_path)
    assert "ray/tune/episode_reward_mean" not in scalars
    assert "ray/tune/episode_reward_max" not in scalars
    assert "ray/tune/training_iteration" in scalars


def test_numpy_values_become_plain_json(tmp_path):
    with ResultLogger(tmp_path, {}) as logger:
        logger.log(result(1, episode_len_mean=np.float32(22.5), episodes_total=np.int64(7),
                          done=np.bool_(False), obs_mean=np.arange(3, dtype=np.float64)))
    line = strict_json((tmp_path / "result.json").read_text())
    assert line["episode_len_mean"] == 22.5 and line["episodes_total"] == 7
    assert line["done"] is False and line["obs_mean"] == [0.0, 1.0, 2.0]
    _, rows = read_csv(tmp_path / "progress.csv")
    assert rows[0]["episodes_total"] == "7" and rows[0]["done"] == "False"
    assert rows[0]["obs_mean"] == "[0.0, 1.0, 2.0]"
    scalars = tb_scalars(tmp_path)
    assert scalars["ray/tune/episodes_total"] == [(4000, 7.0)]
    assert "ray/tune/obs_mean" not in scalars  # arrays are not scalars


def test_csv_header_grows_when_new_keys_appear(tmp_path):
    with ResultLogger(tmp_path, {}, tensorboard=False) as logger:
        logger.log(result(1))
        logger.log(result(2, custom_metrics={"goal_reached_mean": 0.5}))
        logger.log(result(3))  # the new key missing again
    header, rows = read_csv(tmp_path / "progress.csv")
    assert header[-1] == "custom_metrics/goal_reached_mean"
    assert header.count("training_iteration") == 1
    assert [r["custom_metrics/goal_reached_mean"] for r in rows] == ["", "0.5", ""]
    assert [r["training_iteration"] for r in rows] == ["1", "2", "3"]
    assert not list(tmp_path.glob("*.tmp"))


def test_each_result_is_on_disk_before_close(tmp_path):
    logger = ResultLogger(tmp_path, {}, tensorboard=False)
    logger.log(result(1))
    assert len((tmp_path / "result.json").read_text().splitlines()) == 1
    assert len(read_csv(tmp_path / "progress.csv")[1]) == 1
    logger.close()
    logger.close()  # twice is fine


def test_a_failing_tensorboard_write_costs_its_events_not_the_run(tmp_path, caplog):
    # A full disk can fail the event file's write before result.json's (it is written
    # from another thread, buffered): tensorboardX's own writer thread then died with a
    # traceback and its bounded queue blocked the next results, so the run hung at close.
    # Here the event file is /dev/full, which fails every write with ENOSPC.
    import threading

    logger = ResultLogger(tmp_path, {"env": "CartPole-v1"})
    logger._tb._py_recordio_writer._writer = open("/dev/full", "wb", buffering=0)
    crashed = []
    hook, threading.excepthook = threading.excepthook, lambda args: crashed.append(args)
    try:
        with caplog.at_level("WARNING", logger="rlmesh.results"):
            for i in range(1, 41):  # past any bounded queue
                logger.log(result(i))
            closer = threading.Thread(target=logger.close, daemon=True)
            closer.start()
            closer.join(30)
    finally:
        threading.excepthook = hook
    assert not closer.is_alive(), "close() hung on the failed event file"
    assert not crashed, crashed
    assert len((tmp_path / "result.json").read_text().splitlines()) == 40  # nothing else lost
    (warning,) = [r.getMessage() for r in caplog.records if "TensorBoard" in r.getMessage()]
    assert "No space left on device" in warning


def test_config_key_stays_out_of_csv_and_tensorboard(tmp_path):
    with ResultLogger(tmp_path, {}) as logger:
        logger.log(result(1, config={"lr": 0.1}))
    header, _ = read_csv(tmp_path / "progress.csv")
    assert not [h for h in header if h.startswith("config")]
    assert not [t for t in tb_scalars(tmp_path) if "config" in t]
    assert strict_json((tmp_path / "result.json").read_text())["config"] == {"lr": 0.1}


def test_trial_dir_layout(tmp_path):
    experiment = default_experiment_name("PPO", "my_pkg.envs:make_env")
    assert experiment.startswith("PPO_my_pkg.envs_make_env_20")
    first, trial_id = make_trial_dir(tmp_path, experiment, "PPO", "CartPole-v1")
    second, _ = make_trial_dir(tmp_path, experiment, "PPO", "CartPole-v1")
    assert first.parent == second.parent == tmp_path / experiment
    assert first != second and first.is_dir() and second.is_dir()
    assert first.name.startswith(f"PPO_CartPole-v1_{trial_id}_0_")
    assert trial_id.endswith("_00000") and len(trial_id) == 11
    assert DEFAULT_LOCAL_DIR == "~/rlmesh_results"


def test_helpers():
    assert safe_name("a/b c:d") == "a_b_c_d"
    assert flatten({"a": {"b": {"c": 1}}, "d": 2, "e": {}}) == {"a/b/c": 1, "d": 2}
    assert to_jsonable({1: (np.float64("nan"), {np.int32(2)})}) == {"1": [None, [2]]}

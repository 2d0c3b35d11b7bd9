"""Video: a recorded evaluation episode is a playable mp4 with one frame per step plus the
reset frame, in the trial's videos/ under `rlmesh train`; `rlmesh rollout --video` and
`--render`; frames to TensorBoard; a missing imageio-ffmpeg is one line."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rlmesh.algorithms import PPOConfig
from rlmesh.results import ResultLogger
from rlmesh.video import FrameRecorder, StepCap, count_frames, read_frames, write_mp4


def test_recorded_evaluation_episode_is_a_playable_mp4_of_the_right_length(tmp_path):
    config = (PPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=1, rollout_fragment_length=100)
              .training(train_batch_size=100, minibatch_size=100, num_epochs=1)
              .evaluation(evaluation_interval=1, evaluation_duration=1,
                          evaluation_num_env_runners=1,
                          evaluation_config={"record_env": str(tmp_path / "videos")})
              .debugging(seed=3))
    with config.build() as algo:
        ev = algo.train()["evaluation"]
    [video] = ev["videos"]
    assert Path(video) == tmp_path / "videos" / "evaluation_iter000001_runner1.mp4"
    [length] = ev["hist_stats"]["episode_lengths"]  # one runner, one env: the recorded one
    assert count_frames(video) == length + 1  # decoded by ffmpeg: the reset frame + each step
    frames = read_frames(video)
    assert frames[0].shape == (400, 600, 3) and frames[0].std() > 0  # CartPole drawn, not black


def test_step_capped_episode_is_recorded_as_partial(tmp_path):
    env = FrameRecorder(StepCap(gym.make("CartPole-v1", render_mode="rgb_array"), 5))
    env.arm(str(tmp_path / "ep"))
    env.reset(seed=0)
    steps = 0
    while True:  # action 0/1 alternating keeps CartPole up for more than 5 steps
        _, _, terminated, truncated, info = env.step(steps % 2)
        steps += 1
        if terminated or truncated:
            break
    assert steps == 5 and info["rlmesh_step_cap"]
    assert env.written == [str(tmp_path / "ep-partial.mp4")]
    assert count_frames(env.written[0]) == 6


def test_recording_needs_rgb_array_rendering():
    with pytest.raises(ValueError, match="render_mode='rgb_array'"):
        FrameRecorder(gym.make("CartPole-v1"))


def test_cli_train_records_into_the_trial_videos_folder_and_tensorboard(tmp_path):
    config = {"num_env_runners": 0, "train_batch_size": 100, "minibatch_size": 100,
              "rollout_fragment_length": 100, "num_epochs": 1, "evaluation_interval": 1,
              "evaluation_duration": 1, "evaluation_config": {"record_env": True},
              "evaluation_video_to_tensorboard": True}
    out = subprocess.run([sys.executable, "-m", "rlmesh.cli.main", "train", "--run", "PPO",
                          "--env", "CartPole-v1", "--local-dir", str(tmp_path), "--config",
                          json.dumps(config), "--stop", '{"training_iteration": 2}'],
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    [trial] = tmp_path.glob("*/*/")
    videos = sorted(p.name for p in (trial / "videos").iterdir())
    assert videos == ["evaluation_iter000001_runner0.mp4", "evaluation_iter000002_runner0.mp4"]
    images = [tag for tag, kind in tensorboard_tags(trial) if kind == "image"]
    assert images.count("evaluation/video") == 2


def tensorboard_tags(trial: Path) -> list[tuple[str, str]]:
    """(tag, "image" or "scalar") of every summary value in the trial's event file."""
    from tensorboardX.proto import event_pb2

    out = []
    for path in trial.glob("events.out.tfevents.*"):
        data = path.read_bytes()
        at = 0
        while at < len(data):  # TFRecord: length, its crc, the bytes, their crc
            (n,) = struct.unpack_from("<Q", data, at)
            event = event_pb2.Event.FromString(data[at + 12:at + 12 + n])
            at += 12 + n + 4
            for v in event.summary.value:
                out.append((v.tag, "image" if v.HasField("image") else "scalar"))
    return out


def test_result_logger_logs_video_frames_only_when_asked(tmp_path):
    frames = [np.full((32, 48, 3), i * 6, np.uint8) for i in range(40)]
    video = write_mp4(tmp_path / "v.mp4", frames, fps=10)
    for asked in (True, False):
        trial = tmp_path / f"trial_{asked}"
        with ResultLogger(trial, video_frames=asked) as logger:
            logger.log({"training_iteration": 1, "evaluation": {"videos": [video]}})
        images = [t for t, kind in tensorboard_tags(trial) if kind == "image"]
        assert images == (["evaluation/video"] if asked else [])


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, ):
    path = tmp_path_factory.mktemp("ckpt") / "checkpoint"
    config = (PPOConfig().environment("CartPole-v1")
              .training(train_batch_size=64, minibatch_size=64, num_epochs=1))
    with config.build() as algo:
        algo.train()
        return algo.save(path)


def rollout(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlmesh.cli.main", "rollout", *args],
                          capture_output=True, text=True, timeout=120, env=env)


def test_rollout_video_writes_each_episode(checkpoint, tmp_path):
    out = rollout(checkpoint, "--episodes", "2", "--seed", "0", "--video", str(tmp_path / "v"))
    assert out.returncode == 0, out.stderr
    lengths = [int(n) for n in re.findall(r"length (\d+)", out.stdout)]
    files = sorted((tmp_path / "v").iterdir())
    assert [f.name for f in files] == ["episode_0001.mp4", "episode_0002.mp4"]
    assert [count_frames(f) for f in files] == [n + 1 for n in lengths]


def test_rollout_render_without_a_display_says_so(checkpoint):
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    out = rollout(checkpoint, "--episodes", "1", "--render", env=env)
    assert out.returncode == 2
    assert "--render needs a display" in out.stderr and "--video DIR" in out.stderr
    assert "Traceback" not in out.stderr


def test_missing_imageio_ffmpeg_is_one_line(checkpoint, tmp_path):
    # A package set to None in sys.modules cannot be imported: as if not installed.
    code = ("import sys; sys.modules['imageio_ffmpeg'] = None; "
            "from rlmesh.cli.main import main; sys.exit(main())")
    out = subprocess.run([sys.executable, "-c", code, "rollout", checkpoint, "--video",
                          str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == (
        "rlmesh rollout: error: --video needs the imageio_ffmpeg package: "
        "pip install 'rlmesh[video]'")


def test_train_with_record_env_and_no_imageio_ffmpeg_is_one_line(tmp_path):
    code = ("import sys; sys.modules['imageio_ffmpeg'] = None; "
            "from rlmesh.cli.main import main; sys.exit(main())")
    config = {"evaluation_interval": 1, "evaluation_config": {"record_env": True}}
    out = subprocess.run([sys.executable, "-c", code, "train", "--run", "PPO", "--env",
                          "CartPole-v1", "--local-dir", str(tmp_path), "--config",
                          json.dumps(config)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "rlmesh train: error: record_env needs the imageio_ffmpeg package: "
        "pip install 'rlmesh[video]'"]

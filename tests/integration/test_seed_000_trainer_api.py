"""Seed 000 (RLlib's "Training APIs" page) as an RLlib user writes it with ``ray`` ->
``rlmesh``: the Python API loop (``ppo.DEFAULT_CONFIG.copy()``, ``ppo.PPOTrainer(config=,
env=)``, ``train``, ``pretty_print``, ``save``/``restore``, ``rlmesh.init``), a global
counter reached through ``rlmesh.experimental.named_actors`` from the driver and the env
runners, and ``rlmesh train --run DQN --env CartPole-v0`` then ``rlmesh rollout CKPT --run
DQN --env CartPole-v0 --steps N`` on RLlib's checkpoint path spelling."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

import rlmesh
import rlmesh.agents.ppo as ppo
from rlmesh.callbacks import Callbacks
from rlmesh.cli.main import main as cli
from rlmesh.experimental import named_actors
from rlmesh.tune.logger import pretty_print


class GlobalCounter:
    """The page's global counter: envs' episodes add to it, the driver reads it."""

    def __init__(self) -> None:
        self.count = 0

    def inc(self, n: int) -> None:
        self.count += n

    def get(self) -> int:
        return self.count


class CountEpisodes(Callbacks):
    """In the env runners: each finished episode increments the counter, Ray's way."""

    def on_episode_end(self, *, episode, **kwargs) -> None:
        named_actors.get_actor("global_counter").inc.remote(1)


@pytest.fixture(scope="module")
def trainer():
    rlmesh.init()
    config = ppo.DEFAULT_CONFIG.copy()
    config["num_gpus"] = 0
    config["num_workers"] = 1
    # Small enough for a test (RLlib's PPO defaults train 4000 steps x 30 epochs).
    config.update(train_batch_size=256, sgd_minibatch_size=128, num_sgd_iter=2,
                  callbacks=CountEpisodes, named_actors={"global_counter": GlobalCounter})
    # The page's era's keys, at their defaults (said once: tests/unit/test_trainer_era_config.py),
    # and its name of the fragment length.
    config.update(monitor=False, use_eager=False, memory=0, object_store_memory=0,
                  sample_batch_size=64)
    trainer = ppo.PPOTrainer(config=config, env="CartPole-v0")
    yield trainer
    trainer.stop()


def test_the_python_api_loop_trains_prints_saves_and_restores(trainer, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # save() with no argument writes under ~
    for i in range(2):
        result = trainer.train()
        text = pretty_print(result)
        assert f"training_iteration: {i + 1}\n" in text and "episode_reward_mean:" in text
        assert "\nconfig:" not in text and not text.startswith("config:")
    checkpoint = trainer.save()
    assert Path(checkpoint).is_dir() and Path(checkpoint).is_relative_to(tmp_path)
    trainer.train()
    trainer.restore(checkpoint)
    assert trainer.iteration == 2 and trainer.config.env == "CartPole-v0"
    assert trainer.config.num_env_runners == 1 and trainer.config.num_gpus_per_learner == 0
    assert trainer.config.rollout_fragment_length == 64 and trainer.config.record_env is False


def test_a_global_counter_through_experimental_named_actors(trainer):
    result = trainer.train()
    counter = named_actors.get_actor("global_counter")
    deadline = time.monotonic() + 10  # the runners' increments are sent, not awaited
    while (rlmesh.get(counter.get.remote()) < result["episodes_total"]
           and time.monotonic() < deadline):
        time.sleep(0.05)
    assert rlmesh.get(counter.get.remote()) >= result["episodes_total"] > 0
    before = counter.get()  # the attribute call docs/named_actors.md shows: waits for it
    assert rlmesh.get([counter.inc.remote(2), counter.get.remote()]) == [None, before + 2]
    counter.inc(1)
    named_actors.register_actor("also_the_counter", counter)
    assert named_actors.get_actor("also_the_counter").get() == before + 3


@pytest.fixture(scope="module")
def dqn_trial(tmp_path_factory) -> Path:
    """`rlmesh train --run DQN --env CartPole-v0` (the page's first command), one iteration."""
    local = tmp_path_factory.mktemp("seed000") / "results"
    run = subprocess.run([sys.executable, "-m", "rlmesh.cli.main", "train", "--run", "DQN",
                          "--env", "CartPole-v0", "--stop", '{"training_iteration": 1}',
                          "--checkpoint-freq", "1", "--local-dir", str(local)],
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr
    (trial,) = local.glob("DQN_CartPole-v0_*/DQN_CartPole-v0_*")
    assert (trial / "checkpoint_000001").is_dir()
    return trial


def test_rollout_with_run_env_and_steps_on_rllibs_checkpoint_path(dqn_trial):
    # RLlib's spelling: checkpoint_1/checkpoint-1 (rlmesh's folder is checkpoint_000001).
    out = subprocess.run([sys.executable, "-m", "rlmesh.cli.main", "rollout",
                          str(dqn_trial / "checkpoint_1" / "checkpoint-1"), "--run", "DQN",
                          "--env", "CartPole-v0", "--steps", "500"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "in CartPole-v0" in out.stdout and "mean return over" in out.stdout


def test_rollout_refuses_a_run_the_checkpoint_was_not_trained_with(dqn_trial, capsys):
    assert cli(["rollout", str(dqn_trial / "checkpoint_000001"), "--run", "PPO",
                "--steps", "10"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a DQN checkpoint; give --run DQN" in err[0]

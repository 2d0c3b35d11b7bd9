"""`rlmesh train` stops on a stop key of RLlib's new API stack, and its result.json carries
both stacks' names of the same values."""

from __future__ import annotations

import json
import subprocess
import sys

from rlmesh.tune.trial import read_results

RLMESH = [sys.executable, "-m", "rlmesh.cli.main"]


def test_train_stops_on_env_runners_episode_return_mean(tmp_path, no_children_left):
    stop = {"env_runners/episode_return_mean": 30, "timesteps_total": 1_000_000}
    run = subprocess.run([*RLMESH, "train", "--run", "PPO", "--env", "CartPole-v1",
                          "--stop", json.dumps(stop), "--local-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "stopped: env_runners/episode_return_mean = " in out, out
    assert "is not in the results" not in out, out  # the stop key was found at once
    (trial,) = [p for p in tmp_path.glob("*/*") if (p / "result.json").exists()]
    results = read_results(trial)
    last = results[-1]
    assert last["env_runners"]["episode_return_mean"] == last["episode_reward_mean"] >= 30
    assert all(r["episode_reward_mean"] < 30 for r in results[:-1])
    assert last["timesteps_total"] < 200_000  # well before the step cap
    assert last["num_env_steps_sampled_lifetime"] == last["timesteps_total"]

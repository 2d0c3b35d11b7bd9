"""make_dataset's "medium" recipe (``--policy-rollout``, D4RL's): a SAC run on Pendulum-v1
stopped at its first greedy evaluation, its policy kept as a checkpoint and played with
sampled actions into whole episodes of the offline format; bad values are one line naming
the field."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from rlmesh.cli.make_dataset import INFO_FILE, POLICY_DIR, main, make_policy_dataset
from rlmesh.driver.inference import InferencePolicy
from rlmesh.offline.reader import OfflineDataset

# Learning starts at once and the first evaluation (2 greedy episodes) comes after 200 env
# steps; a target no return misses stops the run there.
FAST = {"num_steps_sampled_before_learning_starts": 0, "min_sample_timesteps_per_iteration": 200}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("medium") / "data"
    lines: list[str] = []
    info = make_policy_dataset(out, target_return=-1e9, max_env_steps=10_000,
                               rollout_steps=250, config=FAST, fmt="parquet", seed=3,
                               eval_every=200, eval_episodes=2, log=lines.append)
    return out, info, lines


def test_the_policy_is_kept_at_the_first_evaluation_that_reaches_the_target(made):
    out, info, lines = made
    assert info["policy_env_steps_trained"] == 200
    assert [steps for steps, _ in info["evaluations"]] == [200]
    assert info["policy_greedy_return"] == info["evaluations"][0][1]
    assert "greedy evaluation" in lines[0]
    assert (out / POLICY_DIR).is_dir()
    written = yaml.safe_load((out / INFO_FILE).read_text())
    assert written["policy_checkpoint"] == POLICY_DIR
    assert written["mean_return"] == pytest.approx(info["mean_return"])


def test_the_rollout_is_whole_episodes_past_the_asked_steps(made):
    out, info, _ = made
    data = OfflineDataset(str(out), shuffle=False)
    assert list(out.glob("*.parquet")) == [out / "rollout.parquet"]
    # 250 steps asked; Pendulum's episodes are 200 steps: the second is played to its end
    assert info["num_steps"] == data.num_steps == 400
    assert info["num_episodes"] == 2
    assert all(e["truncateds"][-1] and len(e["rewards"]) == 200 for e in data.episodes)
    assert info["mean_return"] == pytest.approx(
        np.mean([e["rewards"].sum() for e in data.episodes]), rel=1e-5)


def test_the_rollout_samples_the_kept_policys_actions(made):
    out, _, _ = made
    policy = InferencePolicy.from_checkpoint(out / POLICY_DIR)
    episode = OfflineDataset(str(out), shuffle=False).episodes[0]
    greedy = np.stack([policy.compute_step(o, None, False)[1] for o in episode["obs"]])
    gap = np.abs(greedy - episode["actions"]).reshape(len(greedy), -1).max(axis=1)
    # sampled actions: off the policy's likeliest, but from the same policy (SAC's initial
    # entropy is high, so most are far off; none is the greedy one exactly)
    assert (gap > 1e-4).all()
    assert np.abs(episode["actions"]).max() <= 1.0


def test_bad_values_are_one_line_naming_the_field(tmp_path, capsys):
    with pytest.raises(ValueError, match="rollout_steps must be >= 1, got 0"):
        make_policy_dataset(tmp_path / "a", -1e9, 1000, 0)
    assert main([str(tmp_path / "b"), "--target", "0", "--policy-rollout", "10",
                 "--eval-every", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["make_dataset: error: eval_every must be >= 1, got 0"]
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "x.json").write_text("")
    assert main([str(tmp_path / "c"), "--target", "0", "--policy-rollout", "10"]) == 2
    assert "is not empty" in capsys.readouterr().err

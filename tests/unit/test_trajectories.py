"""How a learner's time-major batch reaches ``postprocess_trajectory`` and
``learn_on_batch``: cut into trajectories at episode ends, padding left out, each with its
own next observation, then joined into flat samples that name their columns when asked for
one they lack."""

from __future__ import annotations

import numpy as np
import pytest

from rlmesh.rl.columns import MissingColumn, SampleBatch, postprocessed_samples, trajectories


def batch(declared_t: bool = False) -> dict:
    """Two envs over 4 rows. Env 0: an episode ends at row 1, the next runs on past the
    batch. Env 1: truncated at row 2, then padding (mask False)."""
    obs = np.arange(8, dtype=np.float32).reshape(4, 2)  # obs[t, b] = 2t + b
    out = {
        "obs": obs, "actions": np.zeros((4, 2), np.int64), "rewards": obs + 100,
        "terminateds": np.array([[0, 0], [1, 0], [0, 0], [0, 0]], bool),
        "truncateds": np.array([[0, 0], [0, 0], [0, 1], [0, 0]], bool),
        "mask": np.array([[1, 1], [1, 1], [1, 1], [1, 0]], bool),
        "next_obs": np.array([50.0, 51.0], np.float32),
        "trunc_index": np.array([[2, 1]]), "trunc_obs": np.array([77.0], np.float32),
    }
    if declared_t:  # as a runner records it: env 0's first episode began before the batch
        out["t"] = np.array([[5, 0], [6, 1], [0, 2], [1, 0]], np.int64)
    return out


def test_a_batch_is_cut_at_episode_ends_with_each_trajectorys_next_obs():
    got = trajectories(batch())
    assert [list(t["obs"]) for t in got] == [[0.0, 2.0], [4.0, 6.0], [1.0, 3.0, 5.0]]
    # After a terminal step: the next row's obs; at the batch's end: next_obs; after a
    # truncation: the final observation the runner kept (not the reset one).
    assert [float(t["next_obs"]) for t in got] == [4.0, 50.0, 77.0]
    assert [list(t["t"]) for t in got] == [[0, 1], [0, 1], [0, 1, 2]]


def test_a_t_column_the_runner_recorded_is_kept():
    got = trajectories(batch(declared_t=True))
    assert [list(t["t"]) for t in got] == [[5, 6], [0, 1], [0, 1, 2]]


def test_postprocessing_runs_per_trajectory_and_its_columns_reach_the_samples():
    seen = []

    def returns_to_go(traj: SampleBatch) -> SampleBatch:
        seen.append(traj.count)
        traj["returns"] = np.cumsum(traj["rewards"][::-1])[::-1]
        return traj

    samples = postprocessed_samples(batch(), returns_to_go)
    assert seen == [2, 2, 3] and samples.count == 7
    np.testing.assert_array_equal(samples["returns"], [202, 102, 210, 106, 309, 208, 105])
    assert "next_obs" not in samples  # per trajectory only
    with pytest.raises(MissingColumn, match=r"no column 'advantages' \(it has \[.*'returns'"):
        samples["advantages"]

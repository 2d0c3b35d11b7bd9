"""``observation_filter: MeanStdFilter`` when learning from a dataset (BC, MARWIL, CQL, IQL):
the filter takes the data's mean and std, holds them, and the learner, the evaluation runner,
``compute_single_action`` and a restored checkpoint all read observations through it.

The env (FarPointEnv) puts its observations about 1,000 from the origin: the best action is
a function of the small part that varies, which a tanh network reading the raw numbers
cannot see. Each algorithm is trained twice on the same data, with and without the filter;
only the filtered run learns the task."""

from __future__ import annotations

import numpy as np
import pytest

from rlmesh.algorithms.bc_config import BCConfig
from rlmesh.algorithms.cql_config import CQLConfig
from rlmesh.algorithms.iql_config import IQLConfig
from rlmesh.algorithms.marwil_config import MARWILConfig
from rlmesh.config.base import ConfigError
from rlmesh.driver.inference import InferencePolicy
from rlmesh.offline.convert import write
from rlmesh.offline.records import episode_record
from tests.integration.envs_for_tests import FarPointEnv

ENV = "tests.integration.envs_for_tests:FarPointEnv"
SMALL = {"fcnet_hiddens": [64, 64]}
SETTINGS = {
    "BC": (BCConfig, {"train_batch_size": 1000, "minibatch_size": 100, "num_epochs": 1,
                      "lr": 1e-3, "model": SMALL}),
    "MARWIL": (MARWILConfig, {"train_batch_size": 1000, "minibatch_size": 100, "num_epochs": 1,
                              "lr": 1e-3, "beta": 1.0, "model": SMALL}),
    "IQL": (IQLConfig, {"min_train_timesteps_per_iteration": 50 * 256, "model": SMALL,
                        "actor_lr": 1e-3, "critic_lr": 1e-3, "value_lr": 1e-3}),
    "CQL": (CQLConfig, {"min_train_timesteps_per_iteration": 100 * 256, "bc_iters": 0,
                        "num_actions": 2, "q_model_config": SMALL,
                        "policy_model_config": SMALL}),
}
# A policy that always acts 0 scores about -12.5 an episode; the expert, 0.
LEARNED, CONSTANT = -5.0, -8.0


@pytest.fixture(scope="module")
def far_data(tmp_path_factory):
    """40 episodes (1,000 steps) of the expert's actions with a little noise, as JSON lines."""
    env, rng, records = FarPointEnv(), np.random.default_rng(0), []
    for episode in range(40):
        obs, _ = env.reset(seed=episode)
        steps = []
        while True:
            action = np.clip(env.expert_action(obs) + 0.1 * rng.standard_normal(1), -1, 1)
            new_obs, reward, terminated, truncated, _ = env.step(action.astype(np.float32))
            steps.append((obs, action.astype(np.float32), reward, terminated, truncated,
                          new_obs))
            obs = new_obs
            if terminated or truncated:
                break
        records.append(episode_record(*(np.array(c) for c in zip(*steps))))
    path = tmp_path_factory.mktemp("far") / "data"
    write(records, path)
    obs = np.concatenate([r["obs"] for r in records]).astype(np.float64)
    return {"path": str(path), "mean": obs.mean(0), "std": obs.std(0, ddof=1), "n": len(obs)}


def build(name, data, obs_filter, **extra):
    cls, settings = SETTINGS[name]
    return cls.from_dict({"env": ENV, "input": data["path"], "seed": 0,
                          "evaluation_interval": 1, "evaluation_duration": 10,
                          "evaluation_num_env_runners": 1, **settings,
                          "observation_filter": obs_filter, **extra}).build()


@pytest.mark.parametrize("name", ["BC", "MARWIL", "IQL", "CQL"])
def test_the_dataset_filter_is_what_lets_it_learn_far_observations(name, far_data, tmp_path):
    returns = {}
    for obs_filter in ("NoFilter", "MeanStdFilter"):
        algo = build(name, far_data, obs_filter)
        try:
            if obs_filter == "MeanStdFilter":
                state = algo.obs_filter.get_state()
                assert state["n"] == far_data["n"]
                np.testing.assert_allclose(state["mean"], far_data["mean"], rtol=1e-9)
            for _ in range(4):
                result = algo.train()
            returns[obs_filter] = result["evaluation"]["episode_reward_mean"]
            if obs_filter == "MeanStdFilter":
                # held: neither training nor the evaluation runner's episodes moved it
                after = algo.obs_filter.get_state()
                assert after["n"] == far_data["n"]
                np.testing.assert_array_equal(after["mean"], state["mean"])
                raw = np.array([1000.2, -500.1], np.float32)
                normalised = ((raw - far_data["mean"]) / far_data["std"]).astype(np.float32)
                got = algo.compute_single_action(raw, explore=False)
                direct = algo.get_policy().compute_single_action(normalised, explore=False)[0]
                # the algorithm's action is clipped to the env's bounds, the policy's is not
                np.testing.assert_allclose(got, np.clip(direct, -1, 1), atol=1e-5)
                checkpoint = algo.save(tmp_path / name)
        finally:
            algo.stop()
    print(f"{name}: {returns}")
    assert returns["MeanStdFilter"] > LEARNED, returns
    assert returns["NoFilter"] < CONSTANT, returns
    # `rlmesh rollout` restores the filter with the weights: the same action from raw input.
    restored = InferencePolicy.from_checkpoint(checkpoint, trust_code=True)  # the test env
    np.testing.assert_allclose(restored.compute_single_action(raw), got, atol=1e-5)


def test_the_replay_holds_normalised_observations(far_data):
    algo = build("CQL", far_data, "MeanStdFilter", evaluation_interval=None)
    try:
        for column in ("obs", "next_obs"):
            rows = algo.replay.columns[column][:algo.replay.size]
            assert rows.dtype == np.float32
            np.testing.assert_allclose(rows.mean(0), 0.0, atol=0.1)
            np.testing.assert_allclose(rows.std(0), 1.0, atol=0.1)
    finally:
        algo.stop()


def test_a_dataset_read_by_env_runners_refuses_the_filter_in_one_line(far_data):
    with pytest.raises(ConfigError) as e:
        build("MARWIL", far_data, "MeanStdFilter", num_env_runners=1, evaluation_interval=None)
    assert "observation_filter" in str(e.value) and "num_env_runners" in str(e.value)
    assert "\n" not in str(e.value)


def test_a_fragment_read_has_every_observation_column_normalised(far_data):
    """MARWIL's fragments carry the observations its returns bootstrap from (``next_obs``)
    beside ``obs``: both go through the filter, the rest stays as read."""
    from rlmesh.offline.filtering import dataset_filter, filtered
    from rlmesh.offline.reader import OfflineDataset

    data = OfflineDataset(far_data["path"], shuffle=False)
    obs_filter = dataset_filter([data], "MeanStdFilter", FarPointEnv.observation_space)
    fragment = data.sample(100)
    out = filtered(fragment, obs_filter)
    assert len(fragment["next_obs"]) == fragment["obs"].shape[1]  # an episode a column
    for key in ("obs", "next_obs"):
        expected = (fragment[key] - far_data["mean"]) / far_data["std"]
        np.testing.assert_allclose(out[key], expected, atol=1e-4)
    assert out["actions"] is fragment["actions"]
    assert obs_filter.get_state()["n"] == far_data["n"]  # reading did not update it

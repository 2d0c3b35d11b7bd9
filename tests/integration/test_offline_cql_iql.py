"""CQL and IQL learn from a dataset made in this session: SAC's replay on Pendulum-v1 up to a
"medium" return (rlmesh.cli.make_dataset), written as JSON lines and copied to Parquet.
Each must beat the dataset's own average episode return when its policy plays the real env
(the evaluation runner); CQL reads the JSON lines, IQL the Parquet copy and the same episodes
as a local Minari dataset. Discrete CQL is picked for CartPole. Bad input against the real
files: spaces that do not fit, a JSON file cut short, a Parquet row group corrupted: one line
each, and the rest of the data kept."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rlmesh.algorithms.cql_config import CQLConfig
from rlmesh.algorithms.cql_discrete import DiscreteCQLTorchPolicy
from rlmesh.algorithms.iql_config import IQLConfig
from rlmesh.config.base import ConfigError
from rlmesh.driver.inference import InferencePolicy
from rlmesh.offline.convert import write
from rlmesh.offline.json_io import decode
from rlmesh.cli.make_dataset import make_dataset
from rlmesh.offline.reader import DatasetError, OfflineDataset
from rlmesh.offline.records import episode_record

# x 250 gradient steps: both pass the data's average by ~2,500 (figures: docs/offline.md)
ITERATIONS = 14
SMALL = {"fcnet_hiddens": [64, 64]}
# What both runs share: 250 gradient steps of 256 per iteration, one evaluation of 20
# greedy episodes at the end, in the driver's runner.
COMMON = {"env": "Pendulum-v1", "seed": 0, "min_train_timesteps_per_iteration": 250 * 256,
          "evaluation_interval": ITERATIONS, "evaluation_duration": 20,
          "evaluation_num_env_runners": 0}


@pytest.fixture(scope="module")
def pendulum(tmp_path_factory):
    """SAC's replay up to a mean return of -400 (about 4,400 steps), and a Parquet copy."""
    root = tmp_path_factory.mktemp("pendulum")
    info = make_dataset(root / "json", target_return=-400, max_env_steps=10_000,
                        log=lambda line: None)
    episodes = OfflineDataset(str(root / "json"), shuffle=False).episodes
    write(episodes, root / "parquet", "parquet")  # one row group per episode
    print(f"dataset: {info['num_steps']} steps, {info['num_episodes']} episodes, average "
          f"return {info['mean_return']:.1f}")
    return {"json": root / "json", "parquet": root / "parquet", "info": info}


def train(config, iterations):
    algo = config.build()
    try:
        for _ in range(iterations):
            result = algo.train()
        return algo.get_policy(), result
    finally:
        algo.stop()


def test_cql_from_json_lines_beats_the_datasets_average_return(pendulum):
    config = CQLConfig.from_dict({
        **COMMON, "input": str(pendulum["json"]), "q_model_config": SMALL,
        "policy_model_config": SMALL, "min_q_weight": 5.0, "num_actions": 4, "bc_iters": 100,
        "optimization_config": {"actor_learning_rate": 1e-3, "critic_learning_rate": 1e-3,
                                "entropy_learning_rate": 1e-3}})
    _, result = train(config, ITERATIONS)
    info = pendulum["info"]
    assert result["offline"]["num_steps"] == info["num_steps"]
    assert result["offline"]["num_records_skipped"] == 0
    assert result["timesteps_total"] == ITERATIONS * 250 * 256  # rows read count as sampled
    returned = result["evaluation"]["episode_reward_mean"]
    print(f"CQL: evaluation {returned:.1f} against the data's {info['mean_return']:.1f}")
    assert returned > info["mean_return"], (returned, info)


def test_iql_from_parquet_beats_the_datasets_average_return(pendulum):
    config = IQLConfig.from_dict({
        **COMMON, "input": str(pendulum["parquet"]), "model": SMALL,
        "actor_lr": 1e-3, "critic_lr": 1e-3, "value_lr": 1e-3})
    _, result = train(config, ITERATIONS)
    info = pendulum["info"]
    assert result["offline"]["num_steps"] == info["num_steps"]
    returned = result["evaluation"]["episode_reward_mean"]
    print(f"IQL: evaluation {returned:.1f} against the data's {info['mean_return']:.1f}")
    assert returned > info["mean_return"], (returned, info)


def test_iql_from_a_minari_dataset_on_local_disk_beats_the_average(pendulum, tmp_path,
                                                                    monkeypatch):
    """The same episodes as a Minari dataset (made locally, as a user's own would be),
    converted by ``rlmesh.offline.convert minari`` and learned from."""
    minari = pytest.importorskip("minari")
    from minari.data_collector import EpisodeBuffer

    from rlmesh.offline.convert import minari_records

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    buffers = []
    for i, ep in enumerate(OfflineDataset(str(pendulum["json"]), shuffle=False).episodes):
        # Minari keeps n + 1 observations; arrays of the spaces' dtype (float32)
        observations = [np.asarray(o, np.float32) for o in [*ep["obs"], ep["new_obs"][-1]]]
        buffers.append(EpisodeBuffer(
            id=i, observations=observations,
            actions=[np.asarray(a, np.float32).reshape(1) for a in ep["actions"]],
            rewards=list(ep["rewards"]), terminations=list(ep["terminateds"]),
            truncations=list(ep["truncateds"])))
    dataset = minari.create_dataset_from_buffers("pendulum/sac-medium-v0", buffers,
                                                 env=gym.make("Pendulum-v1"),
                                                 data_format="arrow")
    write(minari_records("pendulum/sac-medium-v0"), tmp_path / "from_minari", "parquet")
    config = IQLConfig.from_dict({
        **COMMON, "input": str(tmp_path / "from_minari"), "model": SMALL,
        "actor_lr": 1e-3, "critic_lr": 1e-3, "value_lr": 1e-3})
    _, result = train(config, ITERATIONS)
    assert result["offline"]["num_steps"] == dataset.total_steps == pendulum["info"]["num_steps"]
    returned = result["evaluation"]["episode_reward_mean"]
    print(f"IQL from Minari: {returned:.1f} against the data's "
          f"{pendulum['info']['mean_return']:.1f}")
    assert returned > pendulum["info"]["mean_return"]


def test_cql_on_discrete_actions_learns_with_dqns_loss(tmp_path):
    env, rng, records = gym.make("CartPole-v1"), np.random.default_rng(0), []
    for episode in range(20):  # a random policy's episodes
        obs, _ = env.reset(seed=episode)
        steps = []
        while True:
            action = int(rng.integers(2))
            new_obs, reward, terminated, truncated, _ = env.step(action)
            steps.append((obs, action, reward, terminated, truncated, new_obs))
            obs = new_obs
            if terminated or truncated:
                break
        records.append(episode_record(*(np.array(c) for c in zip(*steps))))
    write(records, tmp_path / "cartpole")
    config = CQLConfig.from_dict({"env": "CartPole-v1", "input": str(tmp_path / "cartpole"),
                                  "min_train_timesteps_per_iteration": 20 * 256,
                                  "evaluation_interval": 1, "evaluation_duration": 2,
                                  "evaluation_num_env_runners": 0})
    algo = config.build()
    try:
        result = algo.train()
        checkpoint = algo.save(tmp_path / "checkpoint")
    finally:
        algo.stop()
    assert isinstance(algo.get_policy(), DiscreteCQLTorchPolicy)
    assert result["info"]["learner"]["default_policy"]["cql_gap"] > 0
    assert result["evaluation"]["episodes_this_iter"] == 2
    # `rlmesh rollout` restores it without the data: the policy class is in the checkpoint.
    restored = InferencePolicy.from_checkpoint(checkpoint)
    assert restored.compute_single_action(np.zeros(4, np.float32)) in (0, 1)


def test_a_dataset_of_other_spaces_is_one_line_naming_both(pendulum):
    config = CQLConfig.from_dict({"env": "MountainCarContinuous-v0",
                                  "input": str(pendulum["json"])})
    with pytest.raises(DatasetError) as e:
        config.build()
    message = str(e.value)
    assert "\n" not in message
    assert "per-step shape (3,)" in message and "Box(" in message and "(2,)" in message


def test_off_policy_estimation_on_data_without_action_logp_is_one_line(pendulum):
    config = IQLConfig.from_dict({"env": "Pendulum-v1", "input": str(pendulum["json"]),
                                  "off_policy_estimation_methods": ["is", "wis"]})
    with pytest.raises(ConfigError, match="has no action_logp") as e:
        config.build()  # a SAC replay: its runners record no log-probabilities
    assert "\n" not in str(e.value)


def _short_iql(source):
    config = IQLConfig.from_dict({"env": "Pendulum-v1", "input": str(source), "model": SMALL,
                                  "min_train_timesteps_per_iteration": 256})
    return train(config, 1)[1]


def test_a_json_file_cut_short_loses_its_last_line_only(pendulum, tmp_path, caplog):
    [source] = Path(pendulum["json"]).glob("*.json")
    lines = source.read_bytes().splitlines(keepends=True)
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / source.name).write_bytes(b"".join(lines[:-1]) + lines[-1][:len(lines[-1]) // 2])
    last_steps = len(decode(lines[-1].decode())[0]["rewards"])
    with caplog.at_level(logging.WARNING, logger="rlmesh.offline.reader"):
        result = _short_iql(cut)
    offline = result["offline"]
    assert offline["num_records_skipped"] == 1
    where = f"{cut / source.name}:{len(lines)}"
    assert offline["skipped"][0].startswith(where + ": not JSON"), offline["skipped"]
    assert [r.getMessage() for r in caplog.records if where in r.getMessage()]  # said once
    # Every other line is read: the steps of the cut line's fragment alone are missing.
    assert pendulum["info"]["num_steps"] - offline["num_steps"] == last_steps


def test_a_corrupt_parquet_row_group_loses_that_group_only(pendulum, tmp_path):
    import pyarrow.parquet as pq

    [source] = Path(pendulum["parquet"]).glob("*.parquet")
    meta = pq.ParquetFile(source).metadata
    data = bytearray(source.read_bytes())
    start = meta.row_group(1).column(1).data_page_offset
    data[start + 20:start + 60] = bytes(b ^ 0xFF for b in data[start + 20:start + 60])
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / source.name).write_bytes(bytes(data))
    offline = _short_iql(broken)["offline"]
    assert offline["num_records_skipped"] == 1
    assert offline["skipped"][0].startswith(f"{broken / source.name}:row group 1: unreadable")
    assert offline["num_episodes"] == pendulum["info"]["num_episodes"] - 1
    assert offline["num_steps"] == pendulum["info"]["num_steps"] - meta.row_group(1).num_rows
    shutil.rmtree(broken)

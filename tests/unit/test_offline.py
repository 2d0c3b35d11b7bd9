"""Offline data without processes: runner fragments written (JSON lines, Parquet) and read
back as whole episodes, RLlib's record forms, bad records skipped and named, spaces checked
at build, shards, estimators, converters, and MARWIL/BC's batches and losses."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmesh.algorithms.bc_config import BCConfig
from rlmesh.algorithms.marwil import MARWILTorchPolicy
from rlmesh.algorithms.marwil_config import MARWILConfig
from rlmesh.offline import DatasetError, OfflineDataset, OutputWriter, resolve_files, shard_files
from rlmesh.offline.convert import minari_records, npz_records, write
from rlmesh.offline.estimators import importance_sampling
from rlmesh.offline.json_io import decode, encode
from rlmesh.offline.records import batch_from_episodes
from rlmesh.policy.policy import Policy
from rlmesh.rl.columns import action_dist_columns
from rlmesh.roles.env_sampler import EnvSampler
from rlmesh.rl.batch import to_tensors


class CoinPolicy(Policy):
    """Acts at random with probability 1/2 each (logged as action_logp)."""

    def __init__(self):
        super().__init__(None, None, None)
        self.rng = np.random.default_rng(0)
        self.view_requirements = action_dist_columns(2)

    def compute_actions(self, obs_batch, state_batches=None, prev_action_batch=None,
                        prev_reward_batch=None, explore=None, timestep=None, **kwargs):
        n = len(obs_batch)
        return (self.rng.integers(2, size=n), [],
                {"action_logp": np.full(n, np.log(0.5), np.float32),
                 "action_dist_inputs": np.zeros((n, 2), np.float32)})


def sample_to(out: Path, fmt: str, fragments: int = 25, max_file_size: int = 4000,
              complete: bool = False, **kw):
    """Fragments of 7 steps of 3 CartPoles (time limit 30: truncations too) written by one
    writer; the fragments returned."""
    sampler = EnvSampler(lambda i: gym.make("CartPole-v1", max_episode_steps=30), 3,
                         CoinPolicy(), seeds=[0, 1, 2])
    writer = OutputWriter(out, 1, fmt, max_file_size, **kw)
    got = []
    for _ in range(fragments):
        f = sampler.sample(7, complete_episodes=complete)
        f["policy_id"] = "default_policy"
        writer.write(f)
        got.append(f)
    writer.close()
    return got, writer


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_fragments_round_trip_as_whole_episodes(tmp_path, fmt):
    fragments, writer = sample_to(tmp_path, fmt)
    files = resolve_files(tmp_path)
    assert len(files) > 2, "output_max_file_size rotates files"
    assert all("worker-1" in f.name and f.suffix == f".{fmt}" for f in files)
    data = OfflineDataset(tmp_path)
    assert data.num_skipped == 0
    assert data.num_steps == sum(f["env_steps"] for f in fragments) == writer.steps_written
    ended = sum(len(f["episodes"]) for f in fragments)
    complete = [e for e in data.episodes if e["terminateds"][-1] or e["truncateds"][-1]]
    assert len(complete) == ended and len(data.episodes) - ended <= 3  # 3 envs still running
    for e in data.episodes:  # joined across fragments and files in order of t
        n = len(e["rewards"])
        assert (e["t"] == np.arange(n)).all()
        assert np.array_equal(e["new_obs"][:-1], e["obs"][1:])
        assert not (e["terminateds"][:-1] | e["truncateds"][:-1]).any()
        assert set(e["policy_id"]) == {"default_policy"} and set(e["agent_id"]) == {"agent0"}
        assert (e["agent_index"] == 0).all() and np.allclose(e["action_prob"], 0.5)
    assert any(e["truncateds"][-1] for e in complete)  # the time limit reached
    long = max(complete, key=lambda e: len(e["rewards"]))
    assert len(long["rewards"]) > 7  # cut by fragments, joined by eps_id


def test_json_lines_are_rllib_sample_batches(tmp_path):
    sample_to(tmp_path, "json", fragments=3)
    line = resolve_files(tmp_path)[0].read_text().splitlines()[0]
    record = json.loads(line)
    assert record["type"] == "SampleBatch"
    for key in ("obs", "new_obs", "actions", "rewards", "terminateds", "truncateds", "eps_id",
                "t", "agent_index", "policy_id", "action_logp", "action_prob"):
        assert isinstance(record[key], list) and len(record[key]) == len(record["rewards"])


def test_compressed_columns_round_trip(tmp_path):
    fragments, _ = sample_to(tmp_path, "json", fragments=4, compress_columns=["obs", "new_obs"])
    record = json.loads(resolve_files(tmp_path)[0].read_text().splitlines()[0])
    assert isinstance(record["obs"], dict) and isinstance(record["rewards"], list)
    data = OfflineDataset(tmp_path)
    assert data.num_steps == sum(f["env_steps"] for f in fragments)
    assert data.episodes[0]["obs"].dtype == np.float32


def test_rllib_record_forms():
    old = {"obs": [[0.0] * 4] * 2, "actions": [0, 1], "rewards": [1.0, 1.0],
           "dones": [False, True], "eps_id": [5, 5]}
    (rec,) = decode(json.dumps(old))  # no "type" (a common hand-made file), RLlib < 2.3 dones
    assert rec["terminateds"].tolist() == [False, True] and not rec["truncateds"].any()
    multi = {"type": "MultiAgentBatch", "count": 2, "policy_batches": {"p1": old}}
    (rec,) = decode(json.dumps(multi))
    assert rec["policy_id"].tolist() == ["p1", "p1"]
    with pytest.raises(ValueError, match="pickled"):
        decode(json.dumps({**old, "obs": "BCJNGGhA..."}))
    back = decode(encode({k: np.asarray(v) for k, v in old.items()}, frozenset({"obs"})))[0]
    assert np.array_equal(back["obs"], np.zeros((2, 4)))


def test_bad_records_are_skipped_and_named(tmp_path):
    sample_to(tmp_path, "json", fragments=6, max_file_size=10**9)
    (path,) = resolve_files(tmp_path)
    good = OfflineDataset(tmp_path).num_steps
    lines = path.read_text().splitlines()
    first_steps = len(json.loads(lines[1])["rewards"])
    lines[1] = lines[1][: len(lines[1]) // 2]  # corrupted in the middle
    lines.append('{"type": "SampleBatch", "obs": [[0, 0, 0, 0]], "actions": [0]')  # truncated
    lines.append('{"type": "SampleBatch", "obs": [[0, 0, 0, 0]], "actions": [0], '
                 '"rewards": [1.0, 2.0], "terminateds": [true], "truncateds": [false]}')
    path.write_text("\n".join(lines))
    data = OfflineDataset(tmp_path)
    assert data.num_skipped == 3
    assert data.num_steps == good - first_steps
    assert data.problems[0].startswith(f"{path}:2: not JSON")
    assert data.problems[1].startswith(f"{path}:{len(lines) - 1}: not JSON")
    assert f"{path}:{len(lines)}: columns of other lengths" in data.problems[2]


def test_truncated_parquet_file_is_skipped(tmp_path):
    sample_to(tmp_path, "parquet", fragments=6)
    files = resolve_files(tmp_path)
    whole = OfflineDataset(tmp_path).num_steps
    files[0].write_bytes(files[0].read_bytes()[:100])
    data = OfflineDataset(tmp_path)
    assert data.num_skipped == 1 and str(files[0]) in data.problems[0]
    assert 0 < data.num_steps < whole


def test_dataset_that_does_not_fit_the_spaces_fails_at_build(tmp_path):
    sample_to(tmp_path, "json", fragments=2)
    with pytest.raises(DatasetError) as e:  # no process is started: read before the mesh
        MARWILConfig().environment("Acrobot-v1").offline_data(input=str(tmp_path)).build()
    message = str(e.value)
    assert "\n" not in message and "obs" in message and "(4,)" in message and "(6,)" in message
    with pytest.raises(DatasetError, match="no data files"):
        BCConfig().environment("CartPole-v1").offline_data(input=str(tmp_path / "nothing")).build()


def test_shards_are_disjoint_and_cover_every_file():
    files = [Path(f"f{i}.json") for i in range(7)]
    shards = [shard_files(files, i, 3) for i in range(3)]
    assert sorted(f for s in shards for f in s) == sorted(files)
    assert all(set(a).isdisjoint(b) for i, a in enumerate(shards) for b in shards[i + 1:])


def test_importance_sampling():
    rewards = [np.ones(3), np.ones(2)]
    same = [np.ones(3), np.ones(2)]
    for weighted in (False, True):
        out = importance_sampling(rewards, same, 0.5, weighted)
        assert out["v_target"] == pytest.approx(out["v_behavior"]) and out["v_gain"] == pytest.approx(1)
    # The target takes episode 0's actions twice as likely, then stops matching episode 1.
    ratios = [np.array([2.0, 4.0, 8.0]), np.array([0.0, 0.0])]
    out = importance_sampling(rewards, ratios, 1.0, False)
    assert out["v_behavior"] == pytest.approx(2.5) and out["v_target"] == pytest.approx(7.0)
    wis = importance_sampling(rewards, ratios, 1.0, True)
    # each step divided by the mean ratio at that step: (2/1 + 4/2 + 8/8 + 0/1 + 0/2) / 2
    assert wis["v_target"] == pytest.approx(2.5)


@pytest.mark.filterwarnings("ignore::UserWarning")  # minari asks for author, permalink, ...
def test_npz_and_minari_converters(tmp_path, monkeypatch):
    obs = np.arange(20, dtype=np.float32).reshape(5, 4)
    np.savez(tmp_path / "d.npz", obs=obs, action=np.array([0, 1, 0, 1, 1]),
             reward=np.ones(5), done=np.array([False, True, False, False, True]))
    assert write(npz_records(tmp_path / "d.npz"), tmp_path / "npz") == 5
    episodes = sorted(OfflineDataset(tmp_path / "npz").episodes, key=lambda e: len(e["rewards"]))
    assert [len(e["rewards"]) for e in episodes] == [2, 3]
    assert np.array_equal(episodes[0]["obs"], obs[:2]) and episodes[0]["terminateds"][-1]

    minari = pytest.importorskip("minari")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    from minari.data_collector import EpisodeBuffer

    env, buffers = gym.make("CartPole-v1"), []
    for i in range(4):  # random episodes, as Minari stores them (n + 1 observations)
        obs, _ = env.reset(seed=i)
        ep = EpisodeBuffer(id=i, observations=[obs], actions=[])
        done = False
        while not done:
            action = env.action_space.sample()
            obs, reward, terminated, truncated, _ = env.step(action)
            ep.observations.append(obs)
            ep.actions.append(action)
            ep.rewards.append(reward)
            ep.terminations.append(terminated)
            ep.truncations.append(truncated)
            done = terminated or truncated
        buffers.append(ep)
    dataset = minari.create_dataset_from_buffers("cartpole/random-v0", buffers, env=env,
                                                 data_format="arrow")  # arrow: no h5py
    steps = write(minari_records(dataset), tmp_path / "from_minari")
    data = OfflineDataset(tmp_path / "from_minari")
    assert steps == data.num_steps == dataset.total_steps
    data.check_spaces(env.observation_space, env.action_space, "CartPole-v1")


def _episodes(lengths):
    rng = np.random.default_rng(0)
    out = []
    for n in lengths:
        term = np.zeros(n, bool)
        term[-1] = True
        out.append({"obs": rng.normal(size=(n, 4)).astype(np.float32),
                    "actions": rng.integers(2, size=n), "rewards": np.ones(n, np.float32),
                    "terminateds": term, "truncateds": np.zeros(n, bool),
                    "new_obs": rng.normal(size=(n, 4)).astype(np.float32)})
    return out


def test_incomplete_episode_bootstraps_from_its_last_new_obs():
    eps = _episodes([5, 3])
    eps[1]["terminateds"][-1] = False  # the data stops before this episode's end
    batch = batch_from_episodes(eps, ["obs", "actions", "rewards", "terminateds", "truncateds"])
    assert batch["mask"].sum(0).tolist() == [5, 3]
    assert batch["truncateds"][2, 1] and batch["trunc_index"].tolist() == [[2, 1]]
    assert np.array_equal(batch["trunc_obs"][0], eps[1]["new_obs"][-1])


@pytest.mark.parametrize("use_lstm", [False, True])
@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_marwil_loss_ignores_padding(beta, use_lstm):
    """Garbage in the padded rows of the time-major batch changes nothing: padding is
    masked out (flat samples, or seq_mask for recurrent models)."""
    config = MARWILConfig().training(beta=beta, model={"use_lstm": use_lstm, "max_seq_len": 4,
                                                       "fcnet_hiddens": [16]})
    space = gym.make("CartPole-v1")
    torch.manual_seed(0)
    policy = MARWILTorchPolicy(space.observation_space, space.action_space, config)
    batch = batch_from_episodes(_episodes([9, 4, 6]),
                                ["obs", "actions", "rewards", "terminateds", "truncateds"])

    def loss(b):
        train = policy.prepare_batch(to_tensors(b, policy.device))
        return policy.loss(train)[0].item()

    clean = loss(batch)
    dirty = {k: v.copy() for k, v in batch.items()}
    dirty["obs"][~batch["mask"]] = 1e3
    dirty["rewards"][~batch["mask"]] = 1e3
    dirty["actions"][~batch["mask"]] = 1
    assert loss(dirty) == pytest.approx(clean, rel=1e-6)
    assert np.isfinite(clean)

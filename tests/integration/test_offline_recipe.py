"""RLlib's offline recipe on real processes: PPO's env runner writes 50k+ steps of CartPole-v1
(complete episodes) to JSON files; BC and MARWIL learn from those files alone (no env step
sampled for training) and are scored by their evaluation runners, as every algorithm is;
`rlmesh rollout --out FILE` writes episodes that the same reader reads back."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from rlmesh.algorithms.bc_config import BCConfig
from rlmesh.algorithms.marwil_config import MARWILConfig
from rlmesh.algorithms.ppo_config import PPOConfig
from rlmesh.offline import OfflineDataset, resolve_files

DATA_STEPS = 50_000


@pytest.fixture(scope="module")
def ppo_data(tmp_path_factory):
    """One PPO run (rl-zoo-like settings, sized for 2 cores: ~30 iterations) writing what its
    one env runner samples; the data directory and the last result."""
    out = tmp_path_factory.mktemp("cartpole-ppo-data")
    config = (PPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=1, num_envs_per_env_runner=8,
                           batch_mode="complete_episodes", rollout_fragment_length="auto")
              .training(train_batch_size=1024, minibatch_size=256, num_epochs=6, lr=0.002,
                        lr_schedule=[[0, 0.002], [60_000, 0.0]], gamma=0.98, lambda_=0.8,
                        use_kl_loss=False, entropy_coeff=0.0, vf_loss_coeff=0.5,
                        vf_clip_param=None, grad_clip=0.5,
                        model={"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh"})
              .offline_data(output=str(out), output_max_file_size=4 * 1024 * 1024)
              .debugging(seed=0))
    algo = config.build()
    try:
        episodes = 0
        while True:
            result = algo.train()
            episodes += result["episodes_this_iter"]
            if result["timesteps_total"] >= DATA_STEPS:
                break
    finally:
        algo.stop()
    return out, result, episodes


def test_ppo_runner_writes_every_step_as_whole_episodes(ppo_data):
    out, result, episodes = ppo_data
    files = resolve_files(out)
    assert len(files) >= 2, "4 MiB rotation over ~15 MiB of data"
    assert all("_worker-1_" in f.name for f in files)  # the one runner's own files
    first = json.loads(files[0].read_text().splitlines()[0])
    assert first["type"] == "SampleBatch" and first["policy_id"][0] == "default_policy"
    data = OfflineDataset(out)
    assert data.num_skipped == 0
    assert data.num_steps == result["timesteps_total"] >= DATA_STEPS
    assert len(data.episodes) == episodes  # complete_episodes: every episode ended in the data
    assert all(e["terminateds"][-1] or e["truncateds"][-1] for e in data.episodes)


def offline_run(config_class, data_dir, iterations, **training):
    """``iterations`` of training from ``data_dir`` with no sampling runner (MARWIL's
    num_env_runners 0), evaluated every 5 on one evaluation runner process over 20 episodes;
    the results and the last evaluation."""
    config = (config_class().environment("CartPole-v1")
              .offline_data(input=str(data_dir), off_policy_estimation_methods=["is", "wis"])
              .training(lr=0.001, train_batch_size=2000, minibatch_size=256, **training)
              .evaluation(evaluation_interval=5, evaluation_duration=20,
                          evaluation_num_env_runners=1)
              .debugging(seed=0))
    algo = config.build()
    try:
        results = [algo.train() for _ in range(iterations)]
        # The driver's training runner was never asked to sample; the evaluation runner
        # is a process of its own.
        assert [m["num_env_steps_sampled"] for m in
                algo.env_runners.foreach_env_runner("metrics")] == [0]
        assert [r.name for r in algo.mesh.eval_runners] == ["eval_runner-1"]
    finally:
        algo.stop()
    assert [r["training_iteration"] for r in results if "evaluation" in r] == [5, 10, 15]
    # no env stepped to train (the runner's metrics above); the rows read count as sampled,
    # as RLlib counts them (each iteration reads whole episodes of >= train_batch_size steps)
    assert all(r["timesteps_total"] == r["num_env_steps_sampled"] >= 2000 * r["training_iteration"]
               for r in results)
    evaluation = results[-1]["evaluation"]
    assert evaluation["episodes_this_iter"] == 20
    assert evaluation["num_env_steps_sampled_this_iter"] > 0
    return results, evaluation


def test_bc_learns_from_the_data_alone(ppo_data, tmp_path):
    out, _, _ = ppo_data
    # A copy with one broken file beside: skipped with its path and line, counted, no crash.
    data = tmp_path / "data"
    shutil.copytree(out, data)
    broken = data / "broken.json"
    broken.write_text('{"type": "SampleBatch", "obs": [[0.1, 0.2')
    results, evaluation = offline_run(BCConfig, data, 15)
    last = results[-1]
    assert last["num_env_steps_trained"] >= 15 * 2000
    assert last["offline"]["num_records_skipped"] == 1
    assert last["offline"]["skipped"][0].startswith(f"{broken}:1: not JSON")
    assert "vf_loss" not in last["info"]["learner"]["default_policy"]  # BC: no critic
    assert set(last["off_policy_estimation"]) == {"is", "wis"}
    assert evaluation["episode_reward_mean"] >= 120, evaluation


def test_marwil_learns_from_the_data_alone(ppo_data):
    out, _, _ = ppo_data
    results, evaluation = offline_run(MARWILConfig, out, 15, beta=1.0)
    stats = results[-1]["info"]["learner"]["default_policy"]
    assert stats["vf_loss"] < results[0]["info"]["learner"]["default_policy"]["vf_loss"]
    assert stats["moving_average_sqd_adv_norm"] > 0
    assert evaluation["episode_reward_mean"] >= 250, evaluation


def test_parquet_output_per_runner_and_a_mixed_input(tmp_path):
    """Two runners write Parquet files of their own; MARWIL then trains on a mix of those
    files and fresh samples ({"sampler": 0.5, dir: 0.5})."""
    out = tmp_path / "parquet"
    config = (PPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=2, num_envs_per_env_runner=2,
                           batch_mode="complete_episodes", rollout_fragment_length=50)
              .training(train_batch_size=400)
              .offline_data(output=str(out), output_format="parquet"))
    algo = config.build()
    try:
        sampled = sum(algo.train()["num_env_steps_sampled_this_iter"] for _ in range(2))
    finally:
        algo.stop()  # closes the Parquet files (their footers)
    files = resolve_files(out)
    assert {f.name.split("_worker-")[1].split("_")[0] for f in files} == {"1", "2"}
    assert all(f.suffix == ".parquet" for f in files)
    assert OfflineDataset(out).num_steps == sampled

    mixed = (MARWILConfig().environment("CartPole-v1")
             .env_runners(num_env_runners=1)
             .offline_data(input={"sampler": 0.5, str(out): 0.5})
             .training(train_batch_size=400)
             .debugging(seed=0))
    algo = mixed.build()
    try:
        results = [algo.train() for _ in range(2)]
        stepped = algo.env_runners.foreach_env_runner("metrics")[0]["num_env_steps_sampled"]
    finally:
        algo.stop()
    # The runner draws each fragment from its env or from the files (its shard: all of
    # them), by the shares; both fed the train batches, read steps counted as sampled.
    assert all(r["num_env_steps_sampled_this_iter"] >= 400 for r in results)
    last = results[-1]
    served = last["offline"]["env_runners"][0]["num_steps_served"]
    assert stepped > 0 and served > 0 and stepped + served == last["num_env_steps_sampled"]
    trained = last["info"]["learner"]["default_policy"]["num_env_steps_trained"]
    assert trained >= last["num_env_steps_sampled_this_iter"]
    assert results[-1]["offline"]["num_records_skipped"] == 0


@pytest.fixture(scope="module")
def small_checkpoint(tmp_path_factory):
    """A PPO CartPole checkpoint after one short iteration (acts, not well)."""
    config = (PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=0)
              .training(train_batch_size=200, minibatch_size=100, num_epochs=1)
              .debugging(seed=0))
    algo = config.build()
    try:
        algo.train()
        return algo.save(tmp_path_factory.mktemp("ckpt") / "checkpoint_000001")
    finally:
        algo.stop()


def rollout(*args):
    run = subprocess.run([sys.executable, "-m", "rlmesh.cli.main", "rollout", *map(str, args)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    lengths = [int(line.rsplit(" ", 1)[1]) for line in run.stdout.splitlines()
               if line.startswith("episode ")]
    return run, lengths


@pytest.mark.parametrize("name", ["episodes.json", "episodes.parquet"])
def test_rollout_out_writes_episodes_that_input_reads_back(small_checkpoint, tmp_path, name):
    """`rlmesh rollout CKPT --out FILE`: each rolled-out episode one record of the offline
    format, read back whole by the offline reader (and by BC's input); an existing FILE is
    refused."""
    out = tmp_path / name
    run, lengths = rollout(small_checkpoint, "--episodes", 4, "--seed", 0, "--out", out)
    assert len(lengths) == 4 and f"episodes: 4 ({sum(lengths)} steps) in {out}" in run.stdout
    if out.suffix == ".json":
        lines = out.read_text().splitlines()
        assert len(lines) == 4 and all(json.loads(x)["type"] == "SampleBatch" for x in lines)
    data = OfflineDataset(out)
    assert data.num_skipped == 0 and len(data.episodes) == 4
    assert sorted(len(e["rewards"]) for e in data.episodes) == sorted(lengths)
    for e in data.episodes:
        assert {"obs", "new_obs", "actions", "rewards", "terminateds", "truncateds", "eps_id",
                "t", "policy_id", "action_logp", "action_prob", "action_dist_inputs"} <= set(e)
        assert e["obs"].shape == (len(e["rewards"]), 4)
        assert (e["obs"][1:] == e["new_obs"][:-1]).all()  # each step's next observation
        assert e["terminateds"][-1] and not e["terminateds"][:-1].any()
        assert np.allclose(np.exp(e["action_logp"]), e["action_prob"])

    bc = (BCConfig().environment("CartPole-v1").offline_data(input=str(out))
          .training(train_batch_size=100, minibatch_size=50))
    algo = bc.build()
    try:
        result = algo.train()
    finally:
        algo.stop()
    assert result["offline"]["num_episodes"] == 4 and result["num_env_steps_trained"] >= 100

    again = subprocess.run([sys.executable, "-m", "rlmesh.cli.main", "rollout",
                            str(small_checkpoint), "--episodes", "1", "--out", str(out)],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and "exists" in again.stderr.strip().splitlines()[-1]


def test_rollout_out_keeps_an_episode_cut_by_steps_as_cut(small_checkpoint, tmp_path):
    out = tmp_path / "cut.json"
    run, lengths = rollout(small_checkpoint, "--steps", 30, "--seed", 0, "--out", out)
    data = OfflineDataset(out)
    assert len(data.episodes) == len(lengths) + 1  # the ended ones and the cut one
    assert data.num_steps == 30
    cut = [e for e in data.episodes if not (e["terminateds"][-1] or e["truncateds"][-1])]
    assert len(cut) == 1 and len(cut[0]["rewards"]) == 30 - sum(lengths)

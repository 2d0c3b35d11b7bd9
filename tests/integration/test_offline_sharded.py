"""``input`` read on the env runners (real runner processes): each of 2 runners reads a
disjoint shard of the files, together all of them, and serves the train batches from it;
a bad record is counted once, by the runner that read it; a mix with the sampler draws
each fragment from one source; with 0 runners the driver reads everything."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlmesh.algorithms.bc import BCConfig
from rlmesh.offline.json_io import JsonFile
from rlmesh.offline.records import episode_record


def _write_dataset(directory, num_files=5, episodes_per_file=4):
    """Random-action CartPole episodes, ``episodes_per_file`` per file, and one line of
    garbage in the second file; the number of steps written."""
    directory.mkdir()
    env, rng, steps = gym.make("CartPole-v1"), np.random.default_rng(0), 0
    for i in range(num_files):
        f = JsonFile(directory / f"part-{i}.json", frozenset())
        for _ in range(episodes_per_file):
            obs, _ = env.reset(seed=int(rng.integers(1 << 30)))
            rows = []
            while True:
                a = int(rng.integers(2))
                new, r, term, trunc, _ = env.step(a)
                rows.append((obs, a, r, term, trunc, new))
                obs = new
                if term or trunc:
                    break
            cols = [np.array(c) for c in zip(*rows)]
            f.write([episode_record(*cols)])
            steps += len(rows)
        if i == 1:
            f.file.write('{"type": "SampleBatch", "obs": [[0.1, 0.2\n')
        f.close()
    return steps


def _bc(data, num_env_runners, **kwargs):
    return (BCConfig()
            .environment("CartPole-v1")
            .env_runners(num_env_runners=num_env_runners, num_envs_per_env_runner=1,
                         rollout_fragment_length=50)
            .offline_data(input=data)
            .training(train_batch_size=200, minibatch_size=100, model={"fcnet_hiddens": [16]},
                      **kwargs)
            .debugging(seed=0))


def test_two_runners_read_disjoint_shards_covering_every_file(tmp_path):
    total = _write_dataset(tmp_path / "data")
    with _bc(str(tmp_path / "data"), 2).build() as algo:
        # the driver read only the first file, to check it against the spaces
        assert [p.name for p in algo.sources[0][1].files] == ["part-0.json"]
        for _ in range(2):
            result = algo.train()
    offline = result["offline"]
    runners = sorted(offline["env_runners"], key=lambda r: r["worker_index"])
    assert [r["worker_index"] for r in runners] == [1, 2]
    files = [{p.rsplit("/", 1)[1] for p in r["files"]} for r in runners]
    assert files[0] and files[1] and not files[0] & files[1]
    assert files[0] | files[1] == {f"part-{i}.json" for i in range(5)}
    assert offline["num_steps"] == total and offline["num_episodes"] == 20
    # the garbage line counted once, named with its file and line, by its shard's runner
    assert offline["num_records_skipped"] == 1
    assert offline["skipped"][0].split(":")[0].endswith("part-1.json")
    assert sum(r["num_records_skipped"] for r in runners) == 1
    # the train batches came from the shards: both runners served fragments
    assert all(r["num_fragments_served"] > 0 for r in runners)
    assert sum(r["num_steps_served"] for r in runners) == result["num_env_steps_sampled"]
    assert result["info"]["learner"]["default_policy"]["num_env_steps_trained"] >= 200


def test_a_mix_draws_each_fragment_from_one_source(tmp_path):
    _write_dataset(tmp_path / "data")
    with _bc({"sampler": 0.5, str(tmp_path / "data"): 0.5}, 2).build() as algo:
        for _ in range(3):
            result = algo.train()
        stepped = sum(m["num_env_steps_sampled"]
                      for m in algo.env_runners.foreach_env_runner("metrics"))
    served = sum(r["num_steps_served"] for r in result["offline"]["env_runners"])
    assert stepped > 0 and served > 0  # both sources fed the train batches
    assert result["num_env_steps_sampled"] == stepped + served


@pytest.mark.parametrize("num_env_runners", [0])
def test_no_runners_the_driver_reads_everything(tmp_path, num_env_runners):
    total = _write_dataset(tmp_path / "data")
    with _bc(str(tmp_path / "data"), num_env_runners).build() as algo:
        assert len(algo.sources[0][1].files) == 5
        result = algo.train()
    assert result["offline"]["num_steps"] == total
    assert result["offline"]["num_records_skipped"] == 1
    assert "env_runners" not in result["offline"]

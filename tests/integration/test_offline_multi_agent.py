"""Multi-agent offline data end to end: a runner process sampling two CartPoles writes
every agent's steps (MultiAgentBatch lines) with its agent id, policy id and episode id;
read back, each (episode, agent) is one whole trajectory; BC trains each policy on its own
agents' steps."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from rlmesh.algorithms import PPOConfig
from rlmesh.algorithms.bc import BCConfig
from rlmesh.offline import OfflineDataset

ENV = "examples.multi_agent_cartpole:make_env"
MAPPING = "tests.integration.multi_agent_envs:cartpole_two"


def test_multi_agent_output_read_back_and_bc_per_policy(tmp_path):
    out = tmp_path / "ma"
    cfg = (PPOConfig()
           .environment(ENV, env_config={"num_agents": 2})
           .env_runners(num_env_runners=1, num_envs_per_env_runner=2, rollout_fragment_length=40)
           .training(train_batch_size=160, minibatch_size=80, num_epochs=1,
                     model={"fcnet_hiddens": [16]})
           .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=MAPPING)
           .offline_data(output=str(out))
           .debugging(seed=0))
    with cfg.build() as algo:
        for _ in range(3):
            result = algo.train()
    sampled = result["num_agent_steps_sampled"]

    lines = [json.loads(x) for f in sorted(out.glob("*.json")) for x in f.read_text().splitlines()]
    assert lines and all(x["type"] == "MultiAgentBatch" for x in lines)
    assert all(set(x["policy_batches"]) <= {"p0", "p1"} for x in lines)
    assert sum(x["count"] for x in lines) == result["num_env_steps_sampled"]

    data = OfflineDataset(out, shuffle=False)
    assert data.num_steps == sampled  # every agent's every step, once
    agents = {(int(e["eps_id"][0]), str(e["agent_id"][0])) for e in data.episodes}
    assert len(agents) == len(data.episodes)  # one trajectory per (episode, agent)
    by_episode: dict[int, set[str]] = {}
    for e in data.episodes:
        aid, pid = str(e["agent_id"][0]), str(e["policy_id"][0])
        assert set(e["agent_id"].astype(str)) == {aid} and set(e["policy_id"].astype(str)) == {pid}
        assert pid == f"p{aid}"  # cartpole_two maps agent i to p<i>
        # joined whole: t counts 0, 1, ... and the CartPole states chain step to step
        np.testing.assert_array_equal(e["t"], np.arange(len(e["t"])))
        np.testing.assert_allclose(e["obs"][1:], e["new_obs"][:-1])
        by_episode.setdefault(int(e["eps_id"][0]), set()).add(aid)
        ended = bool(e["terminateds"][-1] or e["truncateds"][-1])
        assert not (e["terminateds"][:-1] | e["truncateds"][:-1]).any()
        if ended:  # a finished CartPole episode ends where the pole falls (or at 500)
            assert len(e["t"]) < 500 or e["truncateds"][-1]
    assert set(map(frozenset, by_episode.values())) <= {frozenset({"0", "1"}), frozenset({"0"}),
                                                        frozenset({"1"})}
    assert any(len(v) == 2 for v in by_episode.values())  # both agents under one episode id
    assert any(bool(e["terminateds"][-1]) for e in data.episodes)

    for runners in (0, 1):  # read by the driver, or by the runner (offline/sharded.py)
        bc = (BCConfig()
              .environment(ENV, env_config={"num_agents": 2})
              .env_runners(num_env_runners=runners, rollout_fragment_length=100)
              .offline_data(input=str(out))
              .training(train_batch_size=200, minibatch_size=100, model={"fcnet_hiddens": [16]})
              .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=MAPPING,
                           policies_to_train=["p0"])
              .debugging(seed=0))
        with bc.build() as algo:
            before = algo.get_weights()
            result = algo.train()
            after = algo.get_weights()
        info = result["info"]["learner"]
        assert info["p0"]["num_env_steps_trained"] >= 100 and not info["p1"]
        assert any(not np.array_equal(after["p0"][k], v) for k, v in before["p0"].items())
        for k, v in before["p1"].items():
            np.testing.assert_array_equal(after["p1"][k], v)
        assert result["offline"]["num_steps"] == sampled
        assert ("env_runners" in result["offline"]) == bool(runners)


def test_rollout_out_writes_every_agents_episode(tmp_path):
    cfg = (PPOConfig()
           .environment(ENV, env_config={"num_agents": 2})
           .env_runners(num_env_runners=0, rollout_fragment_length=40)
           .training(train_batch_size=80, minibatch_size=40, num_epochs=1,
                     model={"fcnet_hiddens": [16]})
           .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=MAPPING)
           .debugging(seed=0))
    with cfg.build() as algo:
        checkpoint = algo.save(tmp_path / "ckpt")
    out = tmp_path / "episodes.json"
    proc = subprocess.run([sys.executable, "-m", "rlmesh.cli.main", "rollout", checkpoint,
                           "--episodes", "3", "--explore", "--trust-code", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 3 and {x["type"] for x in lines} == {"MultiAgentBatch"}
    data = OfflineDataset(out, shuffle=False)
    assert len(data.episodes) == 6  # 3 episodes x 2 agents
    for line in lines:  # an episode ends when its last CartPole falls (make_multi_agent)
        lengths = [len(b["rewards"]) for b in line["policy_batches"].values()]
        assert len(lengths) == 2 and max(lengths) == line["count"]
    for e in data.episodes:
        assert str(e["policy_id"][0]) == f"p{e['agent_id'][0]}"
        assert e["terminateds"][-1] or e["truncateds"][-1]
        np.testing.assert_allclose(e["obs"][1:], e["new_obs"][:-1])
        assert "action_logp" in e

"""Every on-policy algorithm family runs multi-agent: IMPALA and APPO (asynchronous,
V-trace over per-agent trajectories, batches built across policies), PG and A2C; each
trains both policies of two-agent CartPole and reports them by policy id."""

from __future__ import annotations

import math

import pytest

from rlmesh.algorithms.a2c import A2CConfig
from rlmesh.algorithms.appo_config import APPOConfig
from rlmesh.algorithms.impala_config import ImpalaConfig
from rlmesh.algorithms.pg import PGConfig

MAPPING = "tests.integration.multi_agent_envs:cartpole_two"


def _config(cls, **training):
    return (cls().environment("examples.multi_agent_cartpole:make_env",
                              env_config={"num_agents": 2})
            .env_runners(num_env_runners=1, num_envs_per_env_runner=4,
                         rollout_fragment_length=50)
            .training(model={"fcnet_hiddens": [32]}, **training)
            .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=MAPPING)
            .debugging(seed=0))


@pytest.mark.parametrize("cls,training", [
    (ImpalaConfig, {"lr": 1e-3, "train_batch_size": 400}),
    (APPOConfig, {"lr": 1e-3, "train_batch_size": 400}),
    (PGConfig, {"lr": 4e-4, "train_batch_size": 200}),
    (A2CConfig, {"lr": 1e-3, "train_batch_size": 200}),
], ids=["IMPALA", "APPO", "PG", "A2C"])
def test_algorithm_trains_each_policy_of_a_multi_agent_env(cls, training):
    cfg = _config(cls, **training)
    if cls in (ImpalaConfig, APPOConfig):
        cfg = cfg.reporting(min_time_s_per_reporting=0.5)
    with cfg.build() as algo:
        trained = set()
        for _ in range(6):
            result = algo.train()
            trained |= {pid for pid, stats in result["info"]["learner"].items() if stats}
            if trained == {"p0", "p1"} and result["policy_reward_mean"]:
                break
    assert trained == {"p0", "p1"}
    assert set(result["policy_reward_mean"]) == {"p0", "p1"}
    assert all(math.isfinite(v) for v in result["policy_reward_mean"].values())
    assert result["num_agent_steps_sampled"] > 0


def test_impala_self_play_adds_and_removes_snapshots_while_streaming():
    """Policies added and removed while runners stream to the learner: the runners' first
    policy among them, and fragments of a removed policy still in flight."""
    from examples.self_play import self_play_mapping

    cfg = (ImpalaConfig()
           .environment("rlmesh.env.pettingzoo:make", env_config={"name": "classic/rps-v2"})
           .env_runners(num_env_runners=1, num_envs_per_env_runner=4, rollout_fragment_length=30)
           .training(lr=1e-3, train_batch_size=240, model={"fcnet_hiddens": [16]})
           .reporting(min_time_s_per_reporting=0.5)
           # a dict keeps its order: 'main_v0' is the runners' first policy
           .multi_agent(policies={"main_v0": None, "main": None},
                        policy_mapping_fn=self_play_mapping, policies_to_train=["main"])
           .debugging(seed=0))
    with cfg.build() as algo:
        for i in range(1, 7):
            result = algo.train()
            if i % 2 == 0:
                algo.add_policy(f"main_v{i // 2}",
                                policy_state=algo.get_policy("main").get_state())
            if i == 3:
                algo.remove_policy("main_v0")  # the first policy id, as the runner knew it
        result = algo.train()
        assert sorted(algo.policy_specs) == ["main", "main_v1", "main_v2", "main_v3"]
        assert [p for p, stats in result["info"]["learner"].items() if stats] == ["main"]
        assert result["num_env_runner_restarts"] == 0 and result["episodes_this_iter"] > 0

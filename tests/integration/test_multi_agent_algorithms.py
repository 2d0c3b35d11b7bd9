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

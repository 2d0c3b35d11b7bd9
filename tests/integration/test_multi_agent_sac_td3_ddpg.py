"""SAC, TD3 and DDPG with a multi-agent env and a policy per agent (two Pendulums): a replay
buffer per policy holding only its own agent's transitions, both policies trained from them,
and a policy left out of policies_to_train bit-identical."""

from __future__ import annotations

import numpy as np
import pytest

from rlmesh.algorithms.ddpg import DDPGConfig
from rlmesh.algorithms.sac import SACConfig
from rlmesh.algorithms.td3 import TD3Config

ENVS = "tests.integration.multi_agent_envs"
NET = [32, 32]
pytestmark = pytest.mark.usefixtures("no_children_left")


def two_pendulums(config, **multi_agent):
    return (config.environment(f"{ENVS}:make_marked_pendulums")
            .env_runners(num_env_runners=1, rollout_fragment_length=8)
            .training(train_batch_size=64, training_intensity=64,
                      num_steps_sampled_before_learning_starts=200,
                      replay_buffer_config={"type": "MultiAgentReplayBuffer", "capacity": 5_000})
            .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=f"{ENVS}:pendulum_per_agent",
                         **multi_agent)
            .reporting(min_sample_timesteps_per_iteration=200)
            .debugging(seed=0))


CONFIGS = {
    "SAC": lambda: SACConfig().training(q_model_config={"fcnet_hiddens": NET},
                                        policy_model_config={"fcnet_hiddens": NET}),
    "TD3": lambda: TD3Config().training(actor_hiddens=NET, critic_hiddens=NET)
    .env_runners(exploration_config={"random_timesteps": 200}),
    "DDPG": lambda: DDPGConfig().training(actor_hiddens=NET, critic_hiddens=NET)
    .env_runners(exploration_config={"random_timesteps": 200}),
}


def changed(before, after):
    return any(not np.array_equal(before[k], after[k]) for k in before if not k.startswith("_"))


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", list(CONFIGS))
def test_each_policy_trains_from_its_own_agents_buffer(name):
    with two_pendulums(CONFIGS[name]()).build() as algo:
        before = algo.get_weights()
        for _ in range(3):
            result = algo.train()
        after = algo.get_weights()
        assert set(algo.replays) == {"p0", "p1"}
        numpy_runner = "NumpySACPolicy" if name == "SAC" else "NumpyDDPGPolicy"
        assert all(spec["runner_class"].endswith(numpy_runner)  # runners acted in numpy
                   for spec in algo.policy_specs.values())
        for i, pid in enumerate(("p0", "p1")):
            obs = algo.replays[pid].get_state()["columns"]["obs"][:len(algo.replays[pid])]
            assert len(obs) > 200
            # the observation's last entry is the agent's index: agent i's data only
            assert np.all(obs[:, -1] == i), f"{pid} holds other agents' transitions"
            next_obs = algo.replays[pid].get_state()["columns"]["next_obs"][:len(obs)]
            assert np.all(next_obs[:, -1] == i)
    for pid in ("p0", "p1"):
        stats = result["info"]["learner"][pid]
        assert np.isfinite(stats["critic_loss"]) and stats["num_grad_updates"] > 0
        assert "cur_actor_lr" in stats and "cur_lr" not in stats
        assert changed(before[pid], after[pid]), f"{pid}'s actor did not move"


@pytest.mark.timeout(240)
def test_a_sac_policy_not_trained_stays_bit_identical():
    with two_pendulums(CONFIGS["SAC"](), policies_to_train=["p0"]).build() as algo:
        before = algo.get_weights()
        for _ in range(2):
            result = algo.train()
        after = algo.get_weights()
    assert "critic_loss" in result["info"]["learner"]["p0"]
    assert not result["info"]["learner"].get("p1")
    assert changed(before["p0"], after["p0"])
    assert not changed(before["p1"], after["p1"])

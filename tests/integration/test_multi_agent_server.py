"""A policy server with several policies (.multi_agent): a client's agents act with the
policy each is mapped to, the server's runner ships per-policy fragments and PPO trains
every policy from the clients' data; an agent mapped to an unknown policy is one line."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlmesh.algorithms import PPOConfig
from rlmesh.client import MultiAgentPolicyClient, PolicyServerError
from rlmesh.env import make_multi_agent


def _drive(client, env, env_steps):
    """Episodes of ``env`` through ``client`` until ``env_steps`` steps were taken."""
    taken, seed = 0, 0
    while taken < env_steps:
        seed += 1
        eid = client.start_episode()
        obs, _ = env.reset(seed=seed)
        while obs:
            obs_in = dict(obs)
            actions = client.get_action(eid, obs_in)
            obs, rewards, terms, truncs, _ = env.step(actions)
            client.log_returns(eid, rewards)
            taken += 1
            for aid in [a for a in obs if terms.get(a) or truncs.get(a)]:
                client.end_agent(eid, aid, obs.pop(aid), truncated=not terms.get(aid))
            if terms["__all__"] or truncs.get("__all__"):
                break
        client.end_episode(eid, obs)


def test_policy_server_serves_and_trains_a_policy_per_agent():
    space = gym.make("CartPole-v1")
    cfg = (PPOConfig()
           .environment(observation_space=space.observation_space,
                        action_space=space.action_space)
           .env_runners(policy_server_address="tcp://127.0.0.1:0", num_env_runners=1,
                        policy_server_idle_timeout_s=1.0)
           .training(train_batch_size=200, minibatch_size=100, num_epochs=2,
                     model={"fcnet_hiddens": [16]})
           .multi_agent(policies={"p0", "p1"},
                        policy_mapping_fn="tests.integration.multi_agent_envs:"
                                          "two_policies_then_ghost")
           .debugging(seed=0))
    env = make_multi_agent("CartPole-v1")({"num_agents": 2})
    with cfg.build() as algo:
        before = algo.get_weights()
        address = algo.env_runners.foreach_env_runner("get_address")[0]
        with MultiAgentPolicyClient(address) as client:
            assert client.client.server_info["policies"] == ["p0", "p1"]
            _drive(client, env, 300)
            result = algo.train()
            after = algo.get_weights()
            # agent 2 is mapped to 'ghost': refused in one line naming the agent and the ids
            eid = client.start_episode()
            with pytest.raises(PolicyServerError) as err:
                client.get_action(eid, {2: env.observation_space.sample()})
    message = str(err.value)
    assert "agent 2" in message and "'ghost'" in message and "['p0', 'p1']" in message
    assert "\n" not in message
    learner = result["info"]["learner"]
    for pid in ("p0", "p1"):  # both trained, each from its own agent's steps
        assert np.isfinite(learner[pid]["policy_loss"])
        assert any(not np.array_equal(before[pid][k], after[pid][k]) for k in before[pid])
        assert result["policy_reward_mean"][pid] > 0
    assert result["num_agent_steps_sampled_this_iter"] >= 200

"""Multi-agent runs end to end (real runner processes): agents that leave early, a policy
not in policies_to_train whose weights stay bit-identical, checkpoints holding every policy,
per-policy results, and a mapping to an unknown policy id refused in one line."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from rlmesh.algorithms import Algorithm, PPOConfig
from rlmesh.policy.policy_spec import PolicySpec


def _ppo(env, env_config=None, **multi_agent):
    return (PPOConfig()
            .environment(env, env_config=env_config or {})
            .env_runners(num_env_runners=1, num_envs_per_env_runner=2,
                         rollout_fragment_length=40)
            .training(train_batch_size=160, minibatch_size=80, num_epochs=2,
                      model={"fcnet_hiddens": [16]})
            .multi_agent(**multi_agent)
            .debugging(seed=0))


def test_agents_that_leave_early_train_on_their_own_steps():
    # 'leaver' has a model and learning rate of its own (config overrides of its spec)
    cfg = _ppo("tests.integration.multi_agent_envs:make_early_leaver",
               policies={"stayer": None,
                         "leaver": PolicySpec(config={"model": {"fcnet_hiddens": [8]},
                                                      "lr": 1e-4})},
               policy_mapping_fn="tests.integration.multi_agent_envs:by_agent")
    with cfg.build() as algo:
        result = algo.train()
        result = algo.train()
        shapes = {pid: sorted(w.shape for w in ws.values())
                  for pid, ws in algo.get_weights().items()}
    assert (8, 2) in shapes["leaver"] and (8, 2) not in shapes["stayer"]
    assert (16, 2) in shapes["stayer"]
    assert result["info"]["learner"]["leaver"]["cur_lr"] == pytest.approx(1e-4)
    # 2 envs x 40 steps x 2 rounds per iteration: 160 env steps; episodes of 20 steps hold
    # 20 stayer steps and 3 leaver steps each
    assert result["num_env_steps_sampled_this_iter"] == 160
    assert result["num_agent_steps_sampled_this_iter"] == 160 + 160 * 3 // 20
    assert result["policy_reward_mean"] == {"stayer": 20.0, "leaver": 3.0}
    assert result["episode_reward_mean"] == 23.0
    info = result["info"]["learner"]
    assert info["stayer"]["num_env_steps_trained"] == 160
    assert info["leaver"]["num_env_steps_trained"] == 24
    assert result["num_agent_steps_sampled"] == 2 * (160 + 24)


def test_untrained_policy_stays_bit_identical_and_checkpoints_hold_every_policy(tmp_path):
    cfg = _ppo("examples.multi_agent_cartpole:make_env", {"num_agents": 2},
               policies={"p0", "p1"},
               policy_mapping_fn="tests.integration.multi_agent_envs:cartpole_two",
               policies_to_train=["p0"])
    obs = np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32)
    with cfg.build() as algo:
        before = algo.get_weights()
        for _ in range(2):
            result = algo.train()
        after = algo.get_weights()
        assert set(result["info"]["learner"]["p0"]) and not result["info"]["learner"]["p1"]
        assert set(result["policy_reward_mean"]) == {"p0", "p1"}
        for name, value in before["p1"].items():  # acted all along, never updated
            np.testing.assert_array_equal(after["p1"][name], value)
        assert any(not np.array_equal(after["p0"][k], v) for k, v in before["p0"].items())
        actions = {pid: [algo.compute_single_action(o, policy_id=pid) for o in obs]
                   for pid in ("p0", "p1")}
        path = algo.save(tmp_path / "ckpt")
    with Algorithm.from_checkpoint(path, trust_code=True) as restored:  # names test code
        for pid in ("p0", "p1"):
            assert [restored.compute_single_action(o, policy_id=pid) for o in obs] == actions[pid]
            for name, value in after[pid].items():
                np.testing.assert_array_equal(restored.get_weights()[pid][name], value)
    # rlmesh rollout acts with each agent's policy, through the recorded mapping function
    proc = subprocess.run([sys.executable, "-m", "rlmesh.cli.main", "rollout", path,
                           "--episodes", "2", "--trust-code"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("by policy p0 ") == 2 and "mean return over 2 episodes" in proc.stdout


def test_mapping_to_an_unknown_policy_is_one_line_naming_agent_and_ids():
    cfg = _ppo("tests.integration.multi_agent_envs:make_early_leaver",
               policies={"stayer", "leaver"},
               policy_mapping_fn="tests.integration.multi_agent_envs:to_ghost")
    with pytest.raises(ValueError) as info:
        cfg.build()
    msg = str(info.value)
    assert "\n" not in msg
    assert "agent 'stayer'" in msg and "'ghost'" in msg and "['leaver', 'stayer']" in msg


def test_multi_agent_settings_are_known_config_keys():
    cfg = PPOConfig().update_from_dict({"policies": ["a"], "policy_mapping_fn": "m:f",
                                        "policies_to_train": ["a"],
                                        "count_steps_by": "agent_steps"})
    assert cfg.is_multi_agent and cfg["count_steps_by"] == "agent_steps"
    with pytest.raises(Exception, match="count_steps_by"):
        PPOConfig().multi_agent(count_steps_by="steps").validate()


def test_policy_client_speaks_multi_agent_episodes():
    """A simulator with two CartPoles drives episodes through MultiAgentPolicyClient (dicts
    of observations and rewards); the server's policy learns from each agent's steps."""
    import gymnasium as gym

    from examples.multi_agent_cartpole import MultiAgentCartPole
    from rlmesh.client import MultiAgentPolicyClient

    space = gym.make("CartPole-v1")
    cfg = (PPOConfig()
           .environment(observation_space=space.observation_space,
                        action_space=space.action_space)
           .env_runners(policy_server_address="tcp://127.0.0.1:0", num_env_runners=1,
                        policy_server_idle_timeout_s=1.0)
           .training(train_batch_size=200, minibatch_size=100, num_epochs=2,
                     model={"fcnet_hiddens": [16]})
           .debugging(seed=0))
    with cfg.build() as algo:
        address = algo.env_runners.foreach_env_runner("get_address")[0]
        env = MultiAgentCartPole({"num_agents": 2})
        with MultiAgentPolicyClient(address) as client:
            lengths, seed = [], 0
            while sum(lengths) < 300:  # env steps; each is one or two agent steps
                seed += 1
                eid = client.start_episode()
                obs, _ = env.reset(seed=seed)
                length = 0
                while obs:
                    actions = client.get_action(eid, obs)
                    obs, rewards, terms, truncs, _ = env.step(actions)
                    client.log_returns(eid, rewards)
                    length += 1
                    for aid in [a for a in obs if terms.get(a) or truncs.get(a)]:
                        client.end_agent(eid, aid, obs.pop(aid), truncated=not terms.get(aid))
                    if terms["__all__"]:
                        break
                client.end_episode(eid, obs)
                lengths.append(length)
            result = algo.train()
        # each agent's episode reached the server as an episode of its own
        assert result["episodes_this_iter"] >= 2
        assert result["timesteps_total"] >= 200
        assert np.isfinite(result["info"]["learner"]["default_policy"]["policy_loss"])


@pytest.mark.parametrize("count_steps_by,rounds", [("env_steps", 3), ("agent_steps", 2)])
def test_count_steps_by_decides_what_the_train_batch_counts(count_steps_by, rounds):
    # a round: 2 envs x 40 steps = 80 env steps, 80 + 12 agent steps (the leaver's 3 of 20)
    cfg = _ppo("tests.integration.multi_agent_envs:make_early_leaver",
               policies={"stayer", "leaver"},
               policy_mapping_fn="tests.integration.multi_agent_envs:by_agent",
               count_steps_by=count_steps_by).training(train_batch_size=170)
    with cfg.build() as algo:
        result = algo.train()
    assert result["num_env_steps_sampled_this_iter"] == 80 * rounds


def test_an_algorithm_without_multi_agent_support_says_so_at_build():
    from rlmesh.algorithms.a3c import A3CConfig

    cfg = A3CConfig().environment("examples.multi_agent_cartpole:make_env").env_runners(
        num_env_runners=1)
    with pytest.raises(ValueError, match="A3C does not run multi-agent envs yet") as info:
        cfg.build()
    assert "\n" not in str(info.value)

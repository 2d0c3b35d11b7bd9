"""PG's discounted returns, and the PG, A2C and A3C policies and configs on batches built
here (no processes): losses that push the right way, microbatches that change nothing."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmesh.algorithms.a2c import A2CConfig, A2CTorchPolicy
from rlmesh.algorithms.a3c import A3CConfig, A3CTorchPolicy
from rlmesh.algorithms.pg import PGConfig, PGTorchPolicy
from rlmesh.config.base import ConfigError
from rlmesh.policy.policy import class_path
from rlmesh.rl.batch import to_tensors
from rlmesh.rl.columns import merge_fragments
from rlmesh.rl.gae import discounted_returns
from rlmesh.roles.env_sampler import EnvSampler

CARTPOLE = gym.make("CartPole-v1")
OBS_SPACE, ACTION_SPACE = CARTPOLE.observation_space, CARTPOLE.action_space


# --- discounted returns ---

def returns_of(rewards, terminateds, truncateds, gamma):
    out = discounted_returns(torch.tensor(rewards, dtype=torch.float32),
                             torch.tensor(terminateds), torch.tensor(truncateds), gamma)
    return out.numpy()


def test_returns_restart_after_every_episode_end_and_bootstrap_nothing():
    # One env: an episode of 3 steps that terminates, one of 2 cut by a time limit, and
    # one still running when the fragment ends.
    rewards = [[1.0], [2.0], [3.0], [4.0], [5.0], [6.0], [7.0]]
    term = [[False], [False], [True], [False], [False], [False], [False]]
    trunc = [[False], [False], [False], [False], [True], [False], [False]]
    g = 0.5
    expected = [1 + g * 2 + g * g * 3, 2 + g * 3, 3, 4 + g * 5, 5, 6 + g * 7, 7]
    np.testing.assert_allclose(returns_of(rewards, term, trunc, g)[:, 0], expected)


def test_returns_of_each_env_are_its_own_and_match_a_per_episode_loop():
    rng = np.random.default_rng(0)
    T, B, gamma = 40, 5, 0.9
    rewards = rng.normal(size=(T, B)).astype(np.float32)
    term = rng.random((T, B)) < 0.1
    trunc = rng.random((T, B)) < 0.05
    got = returns_of(rewards, term, trunc, gamma)
    for b in range(B):
        g = 0.0
        for t in reversed(range(T)):
            g = rewards[t, b] + (0.0 if term[t, b] or trunc[t, b] else gamma * g)
            assert got[t, b] == pytest.approx(g, rel=1e-5, abs=1e-5), (t, b)


# --- batches ---

def cartpole_batch(policy, steps=40, envs=3, complete_episodes=False):
    """A time-major batch of CartPole sampled with ``policy``, as the learner gets it."""
    sampler = EnvSampler(lambda i: gym.make("CartPole-v1"), envs, policy, seeds=list(range(envs)))
    return to_tensors(merge_fragments([sampler.sample(steps, complete_episodes)]))


def one_state_batch(n=16, reward_of_action=(1.0, 0.0)):
    """``n`` one-step episodes from the same observation, actions alternating 0 and 1, each
    rewarded by ``reward_of_action``: action 0 is the better one."""
    actions = np.arange(n) % 2
    return {
        "obs": torch.zeros((1, n, 4)), "actions": torch.as_tensor(actions)[None],
        "rewards": torch.as_tensor(np.take(reward_of_action, actions), dtype=torch.float32)[None],
        "terminateds": torch.ones((1, n), dtype=torch.bool),
        "truncateds": torch.zeros((1, n), dtype=torch.bool),
        "mask": torch.ones((1, n), dtype=torch.bool),
        "action_logp": torch.full((1, n), -np.log(2.0)),
        "action_dist_inputs": torch.zeros((1, n, 2)),
        "next_obs": torch.zeros((n, 4)), "trunc_index": torch.zeros((0, 2), dtype=torch.int64),
        "trunc_obs": torch.zeros((0, 4)),
    }


def prob_of_action_0(policy):
    with torch.no_grad():
        inputs = policy.model(torch.zeros((1, 4)))[0]
        return float(torch.softmax(inputs, -1)[0, 0])


def value_at_zero(policy):
    with torch.no_grad():
        return float(policy.model(torch.zeros((1, 4)))[1][0])


# --- PG ---

def test_pg_makes_the_rewarded_action_likelier():
    torch.manual_seed(0)
    config = PGConfig().training(lr=0.01, model={"fcnet_hiddens": [16]})
    policy = PGTorchPolicy(OBS_SPACE, ACTION_SPACE, config)
    before = prob_of_action_0(policy)
    for _ in range(20):
        policy.update(one_state_batch(), timesteps=0)
    assert prob_of_action_0(policy) > before + 0.2


def test_pg_loss_weights_log_probabilities_by_the_returns():
    torch.manual_seed(0)
    policy = PGTorchPolicy(OBS_SPACE, ACTION_SPACE, PGConfig().training(gamma=0.5))
    batch = cartpole_batch(policy, steps=20, envs=2, complete_episodes=True)
    train = policy.prepare_batch(batch)
    assert len(train["returns"]) == int(batch["mask"].sum())
    # Every complete CartPole episode ends with reward 1 and nothing after it.
    done = (batch["terminateds"] | batch["truncateds"])[batch["mask"]]
    assert torch.all(train["returns"][done] == 1.0)
    assert torch.all(train["returns"][~done] > 1.0)
    loss, _ = policy.loss(train)
    logp = policy.dist_class.from_inputs(policy.model(train["obs"])[0]).logp(train["actions"])
    expected = -(logp * train["returns"]).mean()
    assert float(loss.detach()) == pytest.approx(float(expected.detach()), rel=1e-6)


def test_pg_refuses_fragments_that_cut_episodes():
    with pytest.raises(ConfigError, match="batch_mode: PG .* 'complete_episodes'"):
        PGConfig().env_runners(batch_mode="truncate_episodes").validate()


# --- A2C ---

def a2c_policy(**training):
    torch.manual_seed(0)
    config = A2CConfig().training(**{"model": {"fcnet_hiddens": [32, 32]}, **training})
    return A2CTorchPolicy(OBS_SPACE, ACTION_SPACE, config)


def test_a2c_step_favours_the_better_action_and_fits_the_value():
    policy = a2c_policy(lr=0.01, vf_loss_coeff=0.5, entropy_coeff=0.0)
    p_before, v_before = prob_of_action_0(policy), value_at_zero(policy)
    for _ in range(30):
        policy.update(one_state_batch(), timesteps=0)
    assert prob_of_action_0(policy) > p_before + 0.2
    # The one-step return is 1 or 0, half the time each: the value tends to 0.5.
    assert abs(value_at_zero(policy) - 0.5) < 0.5 * abs(v_before - 0.5)


def test_a2c_entropy_bonus_flattens_the_policy():
    policy = a2c_policy(lr=0.01, vf_loss_coeff=0.0, entropy_coeff=1.0)
    batch = one_state_batch(reward_of_action=(0.0, 0.0))
    with torch.no_grad():
        policy.model.pi_head.bias.copy_(torch.tensor([2.0, -2.0]))  # far from uniform
        policy.model.vf_head.weight.zero_()  # V = 0 = every return: no advantage, so
        policy.model.vf_head.bias.zero_()  # only the entropy term moves the policy
    start = abs(prob_of_action_0(policy) - 0.5)
    for _ in range(30):
        policy.update(batch, timesteps=0)
    assert abs(prob_of_action_0(policy) - 0.5) < 0.5 * start


def test_microbatches_give_the_update_of_the_whole_batch():
    whole = a2c_policy(lr=0.01)
    parts = a2c_policy(lr=0.01, microbatch_size=32)  # 120 samples: parts of 32, 32, 32, 24
    for a, b in zip(whole.model.parameters(), parts.model.parameters()):
        assert torch.equal(a, b)
    start = [p.detach().clone() for p in whole.model.parameters()]
    batch = cartpole_batch(whole, steps=40, envs=3)
    assert int(batch["mask"].sum()) == 120
    for _ in range(3):
        stats_whole = whole.update(batch, timesteps=0)
        stats_parts = parts.update(batch, timesteps=0)
    for s, a, b in zip(start, whole.model.parameters(), parts.model.parameters()):
        assert not torch.equal(s, a)
        # float32 sums in another order, through Adam's division: 1e-5 is 0.1% of a step
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    for key in ("total_loss", "policy_loss", "vf_loss", "entropy"):
        assert stats_parts[key] == pytest.approx(stats_whole[key], rel=1e-4, abs=1e-6)
    assert stats_parts["num_grad_updates"] == stats_whole["num_grad_updates"] == 1


def test_a2c_batch_bootstraps_cut_fragments_from_the_critic():
    policy = a2c_policy(gamma=0.9, **{"lambda": 1.0})
    batch = cartpole_batch(policy, steps=5, envs=2)  # no CartPole episode ends in 5 steps
    train = policy.prepare_batch(batch)
    with torch.no_grad():
        last = policy.model(batch["next_obs"])[1]
        values = policy.model(train["obs"])[1]
    # Rows are time-major: the last two samples are the last step of each env.
    expected = 1.0 + 0.9 * last
    torch.testing.assert_close(train["value_targets"][-2:], expected)
    torch.testing.assert_close(train["advantages"], train["value_targets"] - values)


# --- A3C ---

def test_a3c_runners_act_with_the_torch_policy_that_computes_gradients():
    config = A3CConfig()
    assert A3CTorchPolicy.runner_class(config) == class_path(A3CTorchPolicy)
    # A2C's runners act with the numpy fast path: they only sample.
    assert A2CTorchPolicy.runner_class(A2CConfig()) != class_path(A2CTorchPolicy)
    torch.manual_seed(0)
    runner_copy = A3CTorchPolicy(OBS_SPACE, ACTION_SPACE, config)
    learner_copy = A3CTorchPolicy(OBS_SPACE, ACTION_SPACE, config)
    learner_copy.set_weights(runner_copy.get_weights())
    grads, stats = runner_copy.compute_gradients(cartpole_batch(runner_copy))
    assert np.isfinite(stats["total_loss"]) and stats["gradients_norm"] > 0
    before = learner_copy.get_weights()
    learner_copy.apply_gradients(grads)
    moved = [k for k, v in learner_copy.get_weights().items() if not np.array_equal(v, before[k])]
    assert moved and set(moved) <= set(grads)


@pytest.mark.parametrize("setting, value, message", [
    ("num_learners", 1, "num_learners: A3C applies"),
    ("microbatch_size", 8, "microbatch_size: A3C"),
])
def test_a3c_config_refuses_what_it_cannot_run(setting, value, message):
    with pytest.raises(ConfigError, match=message):
        A3CConfig().environment("CartPole-v1").update_from_dict({setting: value}).validate()


# --- the entropy schedule (PPO, A2C/A3C; IMPALA's in test_impala_loss.py) ---

@pytest.mark.parametrize("make", ["a2c", "ppo"])
def test_the_entropy_schedule_sets_the_bonus_by_env_steps(make):
    from rlmesh.algorithms.ppo import PPOConfig, PPOTorchPolicy

    cls, hooks = (A2CConfig, A2CTorchPolicy) if make == "a2c" else (PPOConfig, PPOTorchPolicy)
    torch.manual_seed(0)
    config = cls().training(model={"fcnet_hiddens": [16]}, entropy_coeff=0.7,
                            entropy_coeff_schedule=[[0, 0.5], [1000, 0.0]])
    policy = hooks(OBS_SPACE, ACTION_SPACE, config)
    batch = cartpole_batch(policy, steps=20, envs=2)
    assert policy.update(batch, timesteps=500)["entropy_coeff"] == pytest.approx(0.25)
    assert policy.update(batch, timesteps=5000)["entropy_coeff"] == 0.0
    unscheduled = hooks(OBS_SPACE, ACTION_SPACE, cls().training(entropy_coeff=0.7))
    assert unscheduled.update(batch, timesteps=500)["entropy_coeff"] == pytest.approx(0.7)


@pytest.mark.parametrize("cls", ["A2CConfig", "PPOConfig", "ImpalaConfig"])
def test_a_malformed_entropy_schedule_is_refused_by_name(cls):
    from rlmesh.algorithms.impala import ImpalaConfig
    from rlmesh.algorithms.ppo import PPOConfig

    config = {"A2CConfig": A2CConfig, "PPOConfig": PPOConfig, "ImpalaConfig": ImpalaConfig}[cls]()
    config.environment("CartPole-v1").update_from_dict(
        {"entropy_coeff_schedule": [[1000, 0.01], [0, 0.0]]})
    with pytest.raises(ConfigError, match="entropy_coeff_schedule: timesteps must be >= 0"):
        config.validate()

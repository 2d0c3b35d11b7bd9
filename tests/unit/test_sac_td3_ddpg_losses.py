"""DDPG, TD3 and SAC policies on hand-made batches (no processes): the bootstrapped targets,
TD3's smoothing and delay, the Polyak update, which loss moves which network, the entropy
temperature's direction, exploration on the runner side, and state kept by checkpoints."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmesh.algorithms.ddpg import DDPGConfig, DDPGTorchPolicy
from rlmesh.algorithms.sac import SACConfig, SACTorchPolicy
from rlmesh.config.base import ConfigError
from rlmesh.rl.action_noise import ActionNoise
from rlmesh.rl.batch import to_tensors
from rlmesh.rl.distributions import SquashedGaussian

OBS = gym.spaces.Box(-8.0, 8.0, (3,), np.float32)
BOX = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
DISCRETE = gym.spaces.Discrete(3)
SMALL = [16, 16]


def ddpg(exploration_config=None, **training):
    cfg = DDPGConfig().training(actor_hiddens=SMALL, critic_hiddens=SMALL, l2_reg=0.0, **training)
    cfg.env_runners(exploration_config=exploration_config or {})
    cfg.validate()
    return DDPGTorchPolicy(OBS, BOX, cfg).for_learning()


def td3(**training):
    return ddpg(twin_q=True, policy_delay=2, smooth_target_policy=True, **training)


def sac(action_space=BOX, exploration_config=None, **training):
    net = {"fcnet_hiddens": SMALL}
    cfg = SACConfig().training(q_model_config=net, policy_model_config=net, **training)
    cfg.env_runners(exploration_config=exploration_config or {})
    cfg.validate()
    return SACTorchPolicy(OBS, action_space, cfg).for_learning()


def batch(n=8, discrete=False, seed=0):
    rng = np.random.default_rng(seed)
    return {"obs": rng.normal(size=(n, 3)).astype(np.float32),
            "next_obs": rng.normal(size=(n, 3)).astype(np.float32),
            "actions": (rng.integers(0, 3, n) if discrete
                        else rng.uniform(-1, 1, (n, 1)).astype(np.float32)),
            "rewards": rng.normal(size=n).astype(np.float32),
            "terminateds": np.arange(n) % 3 == 0}


def learn(policy, b, timesteps=0):
    """One gradient step on ``b`` through the learner's entry point (a [K=1, B] batch)."""
    return policy.update({k: np.asarray(v)[None] for k, v in b.items()}, timesteps)


def target_q(policy):
    return policy.target_model["q"] if isinstance(policy, DDPGTorchPolicy) else policy.target_model


def constant_q(q_module, value):
    """Every Q network of ``q_module`` made to answer ``value`` whatever it is given."""
    with torch.no_grad():
        q_module.head.weight.zero_()
        q_module.head.bias.fill_(value)


def params(module):
    return [p.detach().clone() for p in module.parameters()]


def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


# --- targets ---

@pytest.mark.parametrize("make", [ddpg, td3], ids=["ddpg", "td3"])
def test_critic_target_is_reward_plus_discounted_target_q_except_after_termination(make):
    policy = make(gamma=0.9)
    constant_q(target_q(policy), 5.0)
    constant_q(policy.model["q"], 0.0)
    b = batch()
    _, stats = policy.loss(to_tensors(b, "cpu"))
    expected = b["rewards"] + 0.9 * 5.0 * ~b["terminateds"]
    np.testing.assert_allclose(-stats["td_error"].numpy(), expected, rtol=1e-5)
    # 0.5 x squared error per critic, summed over the critics.
    n_critics = 2 if policy.config.twin_q else 1
    assert float(stats["critic_loss"]) == pytest.approx(n_critics * 0.5 * np.mean(expected ** 2),
                                                        rel=1e-5)


def test_replays_discounts_column_sets_the_bootstrap():
    policy = ddpg(gamma=0.9)
    constant_q(target_q(policy), 1.0)
    constant_q(policy.model["q"], 0.0)
    # n-step transitions: gamma^k for the k steps taken, 0 after a termination.
    discounts = np.array([0.9, 0.81, 0.729, 0.0, 0.9, 0.81, 0.0, 0.729], np.float32)
    b = {**batch(), "discounts": discounts}
    _, stats = policy.loss(to_tensors(b, "cpu"))
    expected = b["rewards"] + discounts
    np.testing.assert_allclose(-stats["td_error"].numpy(), expected, rtol=1e-5)


def test_importance_weights_scale_each_sample_of_the_critic_loss():
    policy = ddpg()
    constant_q(target_q(policy), 0.0)
    constant_q(policy.model["q"], 0.0)
    b = batch()
    weights = np.linspace(0, 2, 8).astype(np.float32)
    _, stats = policy.loss(to_tensors({**b, "weights": weights}, "cpu"))
    assert float(stats["critic_loss"]) == pytest.approx(np.mean(0.5 * weights * b["rewards"] ** 2),
                                                        rel=1e-5)


def test_target_policy_smoothing_noise_is_clipped_and_actions_stay_in_bounds():
    policy = td3(target_noise=10.0, target_noise_clip=0.3)
    obs = torch.as_tensor(batch(n=512)["next_obs"])
    plain = policy.target_model["actor"](obs)
    smoothed = policy.target_actions(obs)
    assert not torch.equal(plain, smoothed)
    assert float((smoothed - plain).abs().max()) <= 0.3 + 1e-6  # actions in [-1, 1]
    assert float(smoothed.abs().max()) <= 1.0


# --- which update moves what ---

def test_td3_steps_the_actor_and_the_targets_on_every_second_update_only():
    policy = td3(tau=0.5)
    m, t = policy.model, policy.target_model
    for i in range(5):
        actor, target_actor, target, q = (params(m["actor"]), params(t["actor"]),
                                          params(t["q"]), params(m["q"]))
        stats = learn(policy, batch(seed=i))
        moved = not same(actor, params(m["actor"]))
        assert moved == (i % 2 == 0) == ("actor_loss" in stats)
        # The targets follow (just before) each actor step, and then only.
        assert (not same(target_actor, params(t["actor"]))) == (moved and i > 0)
        assert (not same(target, params(t["q"]))) == (moved and i > 0)
        assert not same(q, params(m["q"]))  # the critics learn on every update


@pytest.mark.parametrize("make", [ddpg, sac], ids=["ddpg", "sac"])
def test_the_actor_loss_reaches_the_actor_only_and_the_critic_loss_the_critic_only(make):
    policy = make()
    m = policy.model
    mb = to_tensors(batch(), "cpu")
    torch.manual_seed(0)
    total, _ = policy.loss(mb)
    q_grads = torch.autograd.grad(total, list(m["q"].parameters()), retain_graph=True)
    actor_grads = torch.autograd.grad(total, list(m["actor"].parameters()))
    torch.manual_seed(0)
    _, stats = policy.loss(mb)
    torch.manual_seed(0)
    critic_only = torch.autograd.grad(stats_loss(policy, mb, "critic"), list(m["q"].parameters()))
    for got, want in zip(q_grads, critic_only):
        torch.testing.assert_close(got, want)
    assert any(float(g.abs().sum()) > 0 for g in actor_grads)


def stats_loss(policy, mb, which):
    """The critic loss alone, recomputed with gradients (``loss`` reports it detached)."""
    if isinstance(policy, DDPGTorchPolicy):
        policy._actor_step = False
        total, _ = policy.loss(mb)
        policy._actor_step = True
        return total
    alpha = policy.model.log_alpha.detach().exp()
    return policy._continuous_losses(mb, alpha)[0]


# --- SAC ---

@pytest.mark.parametrize("space", [BOX, DISCRETE], ids=["box", "discrete"])
@pytest.mark.parametrize("target, direction", [(-50.0, -1), (50.0, 1)])
def test_alpha_falls_when_entropy_is_above_its_target_and_rises_below(space, target, direction):
    policy = sac(space, target_entropy=target)
    for i in range(3):
        learn(policy, batch(discrete=space is DISCRETE, seed=i))
    assert math.copysign(1, float(policy.model.log_alpha.detach())) == direction


def test_auto_target_entropy_is_minus_action_dims_or_098_log_n():
    assert sac(BOX).target_entropy == -1.0
    assert sac(DISCRETE).target_entropy == pytest.approx(0.98 * math.log(3))


def test_discrete_sac_soft_value_sums_over_all_actions():
    policy = sac(DISCRETE, gamma=0.5, initial_alpha=2.0)
    with torch.no_grad():  # a uniform policy: soft value = Q' + alpha x log(n)
        policy.model["actor"].head.weight.zero_()
        policy.model["actor"].head.bias.zero_()
    constant_q(target_q(policy), 3.0)
    constant_q(policy.model["q"], 0.0)
    b = batch(discrete=True)
    _, stats = policy.loss(to_tensors(b, "cpu"))
    expected = b["rewards"] + 0.5 * (3.0 + 2.0 * math.log(3)) * ~b["terminateds"]
    np.testing.assert_allclose(-stats["td_error"].numpy(), expected, rtol=1e-5)
    assert float(stats["entropy"]) == pytest.approx(math.log(3), rel=1e-5)


def test_squashed_gaussian_sample_log_density_matches_logp_of_the_action():
    dist = SquashedGaussian.with_bounds(np.array([-2.0]), np.array([2.0])).from_inputs(
        torch.tensor([[0.3, -0.5], [-0.2, 0.1]]))
    actions, logp = dist.rsample_with_logp()
    torch.testing.assert_close(logp, dist.logp(actions), rtol=1e-4, atol=1e-4)


# --- acting ---

def test_explore_false_gives_the_actor_action_and_exploration_stays_in_bounds():
    policy = ddpg(exploration_config={"type": "GaussianNoise", "random_timesteps": 0,
                                      "stddev": 5.0})
    obs = batch(n=64)["obs"]
    det, _, _ = policy.compute_actions(obs, explore=False)
    again, _, _ = policy.compute_actions(obs, explore=False)
    np.testing.assert_array_equal(det, again)
    noisy, _, _ = policy.compute_actions(obs, explore=True)
    assert not np.allclose(det, noisy) and np.abs(noisy).max() <= 1.0
    assert noisy.shape == (64, 1) and noisy.dtype == np.float32


def test_random_timesteps_are_uniform_over_the_bounds_then_the_policy_acts():
    noise = ActionNoise({"type": "GaussianNoise", "random_timesteps": 1000, "stddev": 0.0},
                        np.array([-2.0]), np.array([2.0]), seed=0)
    random = noise(np.zeros((1000, 1), np.float32))
    assert random.min() < -1.8 and random.max() > 1.8
    np.testing.assert_array_equal(noise(np.full((4, 1), 0.5, np.float32)), 0.5)


def test_ou_noise_is_correlated_in_time_and_its_scale_anneals():
    cfg = {"type": "OrnsteinUhlenbeckNoise", "random_timesteps": 0, "ou_base_scale": 1.0,
           "ou_theta": 0.05, "ou_sigma": 0.2, "initial_scale": 1.0, "final_scale": 0.1,
           "scale_timesteps": 1000}
    noise = ActionNoise(cfg, np.array([-100.0]), np.array([100.0]), seed=0)
    xs = np.array([noise(np.zeros((1, 1), np.float32))[0, 0] for _ in range(500)])
    assert np.corrcoef(xs[:-1], xs[1:])[0, 1] > 0.8  # white noise would be near 0
    assert noise.scale() == pytest.approx(1.0 - 0.9 * 0.5)


def test_sac_random_timesteps_then_samples_and_mode_without_exploration():
    policy = sac(DISCRETE, exploration_config={"random_timesteps": 10})
    obs = batch(n=10)["obs"]
    first, _, _ = policy.compute_actions(obs, explore=True)
    assert first.dtype == np.int64 and set(first) <= {0, 1, 2}
    mode, _, _ = policy.compute_actions(obs, explore=False)
    np.testing.assert_array_equal(mode, policy.compute_actions(obs, explore=False)[0])


@pytest.mark.parametrize("bad", [{"type": "EpsilonGreedy"}, {"stdev": 0.1}])
def test_a_bad_exploration_config_is_a_config_error(bad):
    with pytest.raises(ConfigError, match="exploration_config"):
        DDPGConfig().env_runners(exploration_config=bad).validate()


# --- state ---

@pytest.mark.parametrize("make", [td3, sac], ids=["td3", "sac"])
def test_state_keeps_targets_optimizers_and_alpha(make):
    policy = make()
    for i in range(3):
        learn(policy, batch(seed=i))
    state = policy.get_state()
    fresh = make()
    fresh.set_state(state)
    for name, value in policy.model.state_dict().items():
        torch.testing.assert_close(fresh.model.state_dict()[name], value, msg=name)
    for name, value in policy.target_model.state_dict().items():
        torch.testing.assert_close(fresh.target_model.state_dict()[name], value, msg=name)
    assert not same(params(policy.target_model), params(make().for_learning().target_model))
    for mine, theirs in zip(policy.optimizer.optimizers, fresh.optimizer.optimizers):
        torch.testing.assert_close(mine.exp_avg.flat, theirs.exp_avg.flat)
        assert mine.steps == theirs.steps
    # Both go on identically from there.
    torch.manual_seed(1)
    a = learn(policy, batch(seed=9))
    torch.manual_seed(1)
    b = learn(fresh, batch(seed=9))
    assert a["critic_loss"] == pytest.approx(b["critic_loss"])


def test_runner_weights_are_the_actor_alone():
    policy, runner = sac(), sac()
    runner.set_weights(policy.get_weights())
    assert all(k.startswith(("trunk.", "head.", "_")) for k in policy.get_weights())
    obs = batch()["obs"]
    np.testing.assert_array_equal(policy.compute_actions(obs, explore=False)[0],
                                  runner.compute_actions(obs, explore=False)[0])


@pytest.mark.parametrize("make, configured", [
    (lambda: ddpg(actor_lr=1e-4, critic_lr=2e-3, lr=0.123),
     {"cur_actor_lr": 1e-4, "cur_critic_lr": 2e-3}),
    (lambda: sac(lr=0.123, optimization_config={
        "actor_learning_rate": 1e-3, "critic_learning_rate": 2e-3, "entropy_learning_rate": 5e-4}),
     {"cur_actor_lr": 1e-3, "cur_critic_lr": 2e-3, "cur_alpha_lr": 5e-4})], ids=["DDPG", "SAC"])
def test_learner_stats_report_each_optimizers_own_rate_and_no_cur_lr(make, configured):
    policy = make()
    stats = learn(policy, batch(), timesteps=10_000)
    assert {k: stats[k] for k in configured} == pytest.approx(configured)
    # what the optimizers stepped with, not only what was reported; lr (0.123) drove none
    used = [opt.param_groups[0]["lr"] for opt in policy.optimizer.optimizers]
    assert used == pytest.approx(list(configured.values()))
    assert "cur_lr" not in stats


@pytest.mark.parametrize("config", [SACConfig(), DDPGConfig()], ids=["SAC", "DDPG"])
def test_an_lr_schedule_is_refused_where_no_optimizer_would_follow_it(config):
    config.training(lr_schedule=[[0, 1e-3], [10_000, 1e-4]])
    with pytest.raises(ConfigError, match="lr_schedule: (SAC|DDPG) has no single learning rate"):
        config.validate()

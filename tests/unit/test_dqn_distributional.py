"""Distributional DQN (C51, ``num_atoms`` > 1) and SimpleQ: the categorical projection
against hand-computed targets, the loss against the paper's algorithm written out with
loops, the dueling heads per atom, the runners' numpy twin, export and checkpoints of the
distributional network, the settings' checks, SimpleQ's defaults and registry name, and
SoftQ exploration (RLlib's cartpole-dqn-softq.yaml)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmesh.algorithms.dqn import DQNConfig, DQNTorchPolicy, QModel
from rlmesh.driver.algorithm_registry import get_algorithm_class, get_config_class, registered_name
from rlmesh.config.base import ConfigError
from rlmesh.policy.export import export_model
from rlmesh.policy.numpy_q import NumpyQNet, NumpyQPolicy
from rlmesh.rl import distributional
from tests.unit.test_dqn_loss import B, minibatch  # the same batch of 3-step transitions

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACT = gym.spaces.Discrete(3)
MODEL = {"fcnet_hiddens": [16, 16], "fcnet_activation": "relu"}
ATOMS = 7


# --- the projection ---

def test_support_is_evenly_spaced_from_v_min_to_v_max():
    np.testing.assert_allclose(distributional.support(5, -2.0, 2.0).numpy(), [-2, -1, 0, 1, 2])


def test_projection_splits_each_shifted_atom_between_its_neighbours():
    z = distributional.support(5, 0.0, 4.0)
    probs = torch.tensor([[0.1, 0.2, 0.3, 0.2, 0.2]])
    # r + 0.5 z = [0.5, 1, 1.5, 2, 2.5]: 0.5 -> half to atoms 0 and 1, 1 -> all to atom 1,
    # 1.5 -> half to 1 and 2, 2 -> all to 2, 2.5 -> half to 2 and 3.
    got = distributional.project(probs, torch.tensor([0.5]), torch.tensor([0.5]), z)
    torch.testing.assert_close(got, torch.tensor([[0.05, 0.4, 0.45, 0.1, 0.0]]))


def test_projection_of_a_terminal_step_and_of_targets_off_the_support():
    z = distributional.support(5, 0.0, 4.0)
    probs = torch.tensor([[0.1, 0.2, 0.3, 0.2, 0.2]] * 3)
    rewards = torch.tensor([1.25, 10.0, -3.0])
    discounts = torch.tensor([0.0, 0.9, 0.5])  # a termination: the reward alone
    got = distributional.project(probs, rewards, discounts, z)
    want = torch.tensor([[0.0, 0.75, 0.25, 0.0, 0.0],  # 1.25: a quarter of the way to atom 2
                         [0.0, 0.0, 0.0, 0.0, 1.0],  # clipped to v_max
                         [1.0, 0.0, 0.0, 0.0, 0.0]])  # clipped to v_min
    torch.testing.assert_close(got, want)


def test_projection_keeps_the_mass_and_matches_the_papers_loop():
    gen = torch.Generator().manual_seed(0)
    z = distributional.support(ATOMS, -3.0, 5.0)
    probs = torch.rand(B, ATOMS, generator=gen).softmax(-1)
    rewards = torch.randn(B, generator=gen) * 3
    discounts = torch.where(torch.rand(B, generator=gen) < 0.3, 0.0, 0.97 ** 3)
    got = distributional.project(probs, rewards, discounts, z)
    torch.testing.assert_close(got.sum(-1), torch.ones(B))
    torch.testing.assert_close(got, torch.as_tensor(
        paper_projection(probs.numpy(), rewards.numpy(), discounts.numpy(), z.numpy())))


def paper_projection(probs, rewards, discounts, z):
    """Algorithm 1 of Bellemare et al. (2017), one atom at a time."""
    v_min, v_max, n = z[0], z[-1], len(z)
    dz = (v_max - v_min) / (n - 1)
    m = np.zeros_like(probs, dtype=np.float64)
    for i in range(len(probs)):
        for j in range(n):
            tz = min(v_max, max(v_min, rewards[i] + discounts[i] * z[j]))
            b = (tz - v_min) / dz
            lo, up = int(np.floor(b)), int(np.ceil(b))
            if lo == up:
                m[i, lo] += probs[i, j]
            else:
                m[i, lo] += probs[i, j] * (up - b)
                m[i, up] += probs[i, j] * (b - lo)
    return m.astype(np.float32)


# --- the network and the loss ---

def config(**training) -> DQNConfig:
    return (DQNConfig().environment(observation_space=OBS, action_space=ACT)
            .training(**{"model": MODEL, "hiddens": [8], "num_atoms": ATOMS, "v_min": -2.0,
                         "v_max": 4.0, **training}).debugging(seed=0))


def policy(**training) -> DQNTorchPolicy:
    torch.manual_seed(0)
    pol = DQNTorchPolicy(OBS, ACT, config(**training)).for_learning()
    with torch.no_grad():  # a target network that differs from the online one
        for p in pol.target_model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return pol




def test_dueling_distributional_heads_subtract_the_advantages_mean_per_atom():
    torch.manual_seed(0)
    model = QModel(OBS, ACT.n, MODEL, [8], dueling=True, num_atoms=ATOMS)
    obs = torch.randn(5, 4)
    logits = model.q_logits(obs)
    assert logits.shape == (5, ACT.n, ATOMS)
    x = model.trunk(model.encoder(obs))
    a = model.a_head(model.a_branch(x)).view(5, ACT.n, ATOMS)
    v = model.v_head(model.v_branch(x))
    torch.testing.assert_close(logits, v[:, None, :] + a - a.mean(1, keepdim=True))
    q, best = model(obs)  # the default model's (outputs, value): expected Q, its max
    torch.testing.assert_close(q, (logits.softmax(-1) * model.support).sum(-1))
    torch.testing.assert_close(best, q.max(-1).values)


@pytest.mark.parametrize("double_q,dueling", [(True, True), (False, False), (True, False)])
def test_loss_is_the_cross_entropy_to_the_projected_target(double_q, dueling):
    pol, mb = policy(double_q=double_q, dueling=dueling), minibatch()
    loss, stats = pol.loss(mb)
    z, rows = pol.support, torch.arange(B)
    with torch.no_grad():
        probs_next = pol.target_model.q_logits(mb["next_obs"]).softmax(-1)
        picker = pol.model if double_q else pol.target_model
        pick = picker.q_values(mb["next_obs"]).argmax(-1)
        target = paper_projection(probs_next[rows, pick].numpy(), mb["rewards"].numpy(),
                                  mb["discounts"].numpy(), z.numpy())
    log_p = pol.model.q_logits(mb["obs"])[rows, mb["actions"]].log_softmax(-1)
    ce = -(torch.as_tensor(target) * log_p).sum(-1)
    want = (mb["weights"] * ce).mean()
    torch.testing.assert_close(loss, want)
    # The priorities are the per-sample cross-entropy (RLlib's td_error for num_atoms > 1).
    torch.testing.assert_close(stats["td_error"], ce.detach())
    grads = torch.autograd.grad(loss, list(pol.model.parameters()))
    want_grads = torch.autograd.grad(want, list(pol.model.parameters()))
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w)


def test_batched_target_pass_gives_the_same_loss_as_the_minibatchs_own():
    pol, mb = policy(), minibatch()
    batched = {k: v.unsqueeze(0) for k, v in mb.items()}
    with torch.no_grad():
        outputs = pol.target_outputs(batched)
    assert outputs["target_q_next"].shape == (1, B, ACT.n, ATOMS)
    loss, _ = pol.loss({**mb, "target_q_next": outputs["target_q_next"][0]})
    torch.testing.assert_close(loss, pol.loss(mb)[0])


def test_updates_with_every_rainbow_part_fit_a_fixed_target():
    pol = policy(noisy=True, n_step=3, double_q=True, dueling=True, lr=1e-2)
    batch = {k: v.unsqueeze(0).repeat(20, *[1] * v.ndim).numpy() for k, v in minibatch().items()}
    first = pol.update(batch, timesteps=100)
    assert first["num_grad_updates"] == 20 and np.isfinite(first["total_loss"])
    assert first["td_error"].shape == (20, B) and (first["td_error"] >= 0).all()
    last = pol.update(batch, timesteps=200)
    assert last["total_loss"] < first["total_loss"]


# --- the runners, export, checkpoints ---

def _weights(model: torch.nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("noisy", [False, True])
@pytest.mark.parametrize("dueling,hiddens", [(False, []), (True, [16])])
def test_numpy_q_network_reads_the_distributional_heads(noisy, dueling, hiddens):
    torch.manual_seed(2)
    model = QModel(OBS, ACT.n, MODEL, hiddens, dueling, noisy=noisy, num_atoms=ATOMS,
                   v_min=-1.0, v_max=3.0).eval()
    net = NumpyQNet(OBS, dict(MODEL))
    net.set_weights(_weights(model))
    obs = np.random.default_rng(0).uniform(-1, 1, (20, 4)).astype(np.float32)
    expected = model.q_values(torch.as_tensor(obs)).detach().numpy()
    np.testing.assert_allclose(net(obs), expected, rtol=1e-5, atol=1e-5)
    assert ((expected >= -1.0) & (expected <= 3.0)).all()
    if noisy:
        draws = np.stack([net(obs, np.random.default_rng(i)) for i in range(3)])
        assert not np.allclose(draws[0], draws[1])


def test_runner_and_learner_act_greedily_alike():
    cfg = config(dueling=True).env_runners(
        exploration_config={"initial_epsilon": 0.0, "final_epsilon": 0.0})
    learner = DQNTorchPolicy(OBS, ACT, cfg)
    runner = NumpyQPolicy(OBS, ACT, cfg)
    runner.set_weights(learner.get_weights())
    obs = np.random.default_rng(3).normal(size=(200, 4)).astype(np.float32)
    np.testing.assert_array_equal(runner.compute_actions(obs, explore=True)[0],
                                  learner.compute_actions(obs, explore=False)[0])


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit.load
def test_export_writes_the_expected_q_values(tmp_path):
    torch.manual_seed(0)
    model = QModel(OBS, ACT.n, MODEL, [8], True, num_atoms=ATOMS).eval()
    path = export_model(model, OBS, tmp_path)
    loaded = torch.jit.load(str(path))
    obs = torch.randn(6, 4)
    torch.testing.assert_close(loaded(obs)[0], model.q_values(obs))


def test_state_round_trip_keeps_the_support_and_both_networks():
    pol, mb = policy(), minibatch()
    state = pol.get_state()
    other = DQNTorchPolicy(OBS, ACT, config()).for_learning()
    other.set_state(state)
    torch.testing.assert_close(other.model.support, pol.support)
    torch.testing.assert_close(other.loss(mb)[0], pol.loss(mb)[0])


# --- the settings ---

@pytest.mark.parametrize("training,message", [
    ({"num_atoms": 0}, "num_atoms"),
    ({"num_atoms": 51, "v_min": 10.0, "v_max": 10.0}, "v_min < v_max"),
    ({"num_atoms": 51, "v_min": 5.0, "v_max": -5.0}, "v_min < v_max"),
])
def test_bad_distributional_settings_are_config_errors(training, message):
    with pytest.raises(ConfigError, match=message):
        DQNConfig().environment("CartPole-v1").training(**training).validate()


def test_rllibs_keys_and_defaults():
    cfg = DQNConfig().update_from_dict({"num_atoms": 51, "v_min": 0, "v_max": 200})
    assert (cfg.num_atoms, cfg.v_min, cfg.v_max) == (51, 0, 200)
    assert (DQNConfig().num_atoms, DQNConfig().v_min, DQNConfig().v_max) == (1, -10.0, 10.0)


def test_simple_q_is_plain_dqn_registered_under_its_own_name():
    cfg = get_config_class("SimpleQ")()
    assert (cfg.double_q, cfg.dueling, cfg.hiddens, cfg.n_step, cfg.noisy, cfg.num_atoms) == (
        False, False, [], 1, False, 1)
    assert not cfg.prioritized_replay
    assert cfg.replay_settings()["type"] == "MultiAgentReplayBuffer"
    assert (cfg.lr, cfg.train_batch_size, cfg.target_network_update_freq) == (5e-4, 32, 500)
    algo_class = get_algorithm_class("simpleq")
    assert algo_class.__name__ == "SimpleQ"
    assert registered_name(algo_class) == "SimpleQ"  # checkpoints name it, not DQN
    model = DQNTorchPolicy(OBS, ACT, cfg.environment(observation_space=OBS,
                                                     action_space=ACT)).model
    assert not hasattr(model, "v_head") and len(model.a_branch) == 0


# --- SoftQ exploration ---

def softq_config(temperature: float) -> DQNConfig:
    return (DQNConfig().environment(observation_space=OBS, action_space=ACT)
            .env_runners(exploration_config={"type": "SoftQ", "temperature": temperature})
            .training(model=MODEL, hiddens=[], dueling=False).debugging(seed=0))


def test_softq_draws_actions_from_the_softmax_of_q_over_the_temperature():
    cfg = softq_config(0.5)
    learner = DQNTorchPolicy(OBS, ACT, cfg)
    runner = NumpyQPolicy(OBS, ACT, cfg)
    runner.seed(0)
    runner.set_weights(learner.get_weights())
    obs = np.tile(np.random.default_rng(4).normal(size=(1, 4)).astype(np.float32), (20_000, 1))
    q = learner.model.q_values(torch.as_tensor(obs[:1])).detach().numpy()[0]
    want = np.exp(q / 0.5) / np.exp(q / 0.5).sum()
    for policy in (runner, learner):
        actions = policy.compute_actions(obs, explore=True)[0]
        np.testing.assert_allclose(np.bincount(actions, minlength=3) / len(obs), want, atol=0.015)
        assert (policy.compute_actions(obs[:50], explore=False)[0] == q.argmax()).all()


@pytest.mark.parametrize("exploration,message", [
    ({"type": "SoftQ", "temperature": 0.0}, "temperature must be > 0"),
    ({"type": "SoftQ", "tau": 1.0}, "'SoftQ' with 'temperature'"),
    ({"type": "GaussianNoise"}, "'SoftQ' with 'temperature'"),
])
def test_bad_exploration_configs_are_config_errors(exploration, message):
    with pytest.raises(ConfigError, match=message):
        DQNConfig().environment("CartPole-v1").env_runners(
            exploration_config=exploration).validate()

"""V-trace on Box (Gaussian) actions (issue 54): APPO's surrogate refers to the behaviour
policy there ('auto'), and IMPALA's and APPO's policy-gradient advantages are centred, so a
batch whose advantages all share one sign cannot widen the Gaussian by itself; under
IMPALA's V-trace the baseline sits inside the importance weights. Discrete actions keep
RLlib's loss. Learner objects without processes; the run is
tests/integration/test_learning_defaults.py::test_appo_with_vtrace_learns_pendulum."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmesh.algorithms.appo import APPOConfig, APPOTorchPolicy, target_model
from rlmesh.algorithms.impala import ImpalaConfig, ImpalaTorchPolicy, centered, evaluate
from rlmesh.rl.batch import to_tensors
from rlmesh.rl.vtrace import vtrace

OBS = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
BOX = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
DISCRETE = gym.spaces.Discrete(2)


def learner(cls, hooks, action_space, **training):
    config = cls().training(**{"model": {"fcnet_hiddens": [8], "vf_share_layers": False},
                               **training}).debugging(seed=0)
    torch.manual_seed(0)
    return hooks(OBS, action_space, config).for_learning()


def batch_of(lrn, t: int = 5, b: int = 4, reward: float = -10.0) -> dict:
    """A fragment sampled by the learner's own policy, every reward ``reward``."""
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(t, b, 3)).astype(np.float32)
    with torch.no_grad():
        inputs, _ = lrn.model(torch.as_tensor(obs).flatten(0, 1))
        dist = lrn.dist_class.from_inputs(inputs)
        actions = dist.sample()
        logp = dist.logp(actions)
    f = {"obs": obs, "actions": actions.reshape(t, b, *actions.shape[1:]).numpy(),
         "action_logp": logp.reshape(t, b).numpy(),
         "action_dist_inputs": inputs.reshape(t, b, -1).numpy(),
         "rewards": np.full((t, b), reward, np.float32),
         "terminateds": np.zeros((t, b), bool), "truncateds": np.zeros((t, b), bool),
         "mask": np.ones((t, b), bool), "next_obs": rng.normal(size=(b, 3)).astype(np.float32),
         "trunc_index": np.zeros((0, 2), np.int64), "trunc_obs": np.zeros((0, 3), np.float32)}
    return to_tensors(f, lrn.device)


def move_target_network(lrn) -> None:
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in target_model(lrn).parameters():
            p.add_(torch.randn(p.shape, generator=gen))


def surrogate_stats(lrn, batch) -> dict:
    """The clip fraction and the KL to the anchor: the loss's for a whole batch, the
    update's (once, on the whole batch: ``update_stats``) for minibatches."""
    train = lrn.prepare_batch(batch)
    if "vs" in train:
        return lrn.update_stats(train, len(train["vs"]))
    return lrn.loss(train)[1]


@pytest.mark.parametrize("space,anchor", [(BOX, "auto"), (DISCRETE, "behaviour")])
def test_the_surrogate_refers_to_the_behaviour_policy(space, anchor):
    """The target network far from the policy that sampled: against the behaviour policy
    (which the learner still is) nothing is clipped."""
    lrn = learner(APPOConfig, APPOTorchPolicy, space, surrogate_anchor=anchor)
    assert lrn.anchored_to_behaviour
    batch = batch_of(lrn)
    move_target_network(lrn)
    stats = surrogate_stats(lrn, batch)
    assert float(stats["clip_fraction"]) == 0.0
    assert abs(float(stats["mean_kl_loss"])) < 1e-6  # the KL term's reference is the same


@pytest.mark.parametrize("space,anchor", [(DISCRETE, "auto"), (BOX, "target")])
def test_the_surrogate_refers_to_the_target_network(space, anchor):
    lrn = learner(APPOConfig, APPOTorchPolicy, space, surrogate_anchor=anchor)
    assert not lrn.anchored_to_behaviour
    batch = batch_of(lrn)
    move_target_network(lrn)
    stats = surrogate_stats(lrn, batch)
    assert float(stats["clip_fraction"]) > 0.0
    assert float(stats["mean_kl_loss"]) > 1e-3


def test_without_vtrace_the_anchor_is_always_the_behaviour_policy():
    lrn = learner(APPOConfig, APPOTorchPolicy, DISCRETE, vtrace=False, surrogate_anchor="target")
    assert lrn.anchored_to_behaviour


@pytest.mark.parametrize("space,anchor,setting,weighted", [
    (DISCRETE, "behaviour", "auto", False),  # pi/mu is the importance weight already
    (BOX, "auto", "auto", False),
    (DISCRETE, "auto", "auto", True),  # the target network's ratio has none of its own
    (DISCRETE, "target", "auto", True),
    (DISCRETE, "behaviour", True, True),  # as set (RLlib's defaults: True)
    (DISCRETE, "target", False, False),
])
def test_vtraces_pg_rho_goes_with_the_anchor_unless_set(space, anchor, setting, weighted):
    lrn = learner(APPOConfig, APPOTorchPolicy, space, surrogate_anchor=anchor,
                  vtrace_pg_rho=setting)
    assert lrn.pg_rho is weighted
    batch = batch_of(lrn)
    move_target_network(lrn)  # the target's rho far from 1
    with torch.no_grad():
        train = lrn.prepare_batch(batch)
        _, values, bootstrap = evaluate(lrn, batch, lrn.model)
        old_logp = lrn.anchor(batch)[1]
        ref = vtrace(batch["action_logp"], old_logp, batch["rewards"], values, bootstrap,
                     batch["terminateds"], batch["truncateds"], lrn.config.gamma,
                     pg_rho=weighted)[1]
    torch.testing.assert_close(train["pg_advantages"], ref.flatten())
    assert ImpalaTorchPolicy.pg_rho is True  # IMPALA's loss has no other weight


def test_rllibs_appo_defaults_keep_the_rho_in_the_advantages():
    from rlmesh.config.rllib_defaults import RLLIB_APPO

    assert RLLIB_APPO["vtrace_pg_rho"] is True
    assert APPOConfig().vtrace_pg_rho == "auto"


def test_surrogate_anchor_refuses_other_values():
    with pytest.raises(Exception, match="surrogate_anchor"):
        APPOConfig().training(surrogate_anchor="newest").validate()


def log_std_gradient(cls, hooks, space, **training) -> float:
    """The gradient of the policy loss alone on the log_std output's bias, every reward
    -10 and an untrained critic (so every advantage is about -10 / (1 - gamma))."""
    lrn = learner(cls, hooks, space, entropy_coeff=0.0, **training)
    train = lrn.prepare_batch(batch_of(lrn))
    _, stats = lrn.loss(train)
    lrn.model.zero_grad()
    loss, _ = lrn.loss(train)
    policy_only = loss - lrn.config.vf_loss_coeff * stats["vf_loss"]
    policy_only.backward(inputs=[p for p in lrn.model.parameters()])
    bias = [p for name, p in lrn.model.named_parameters() if p.grad is not None
            and p.dim() == 1 and p.shape[0] == 2][0]  # the policy head's [mean, log_std]
    return float(bias.grad[1])


@pytest.mark.parametrize("cls,hooks", [(ImpalaConfig, ImpalaTorchPolicy),
                                       (APPOConfig, APPOTorchPolicy)])
def test_one_signed_advantages_do_not_widen_a_gaussian_once_centred(cls, hooks):
    raw = log_std_gradient(cls, hooks, BOX, center_advantages=False)
    auto = log_std_gradient(cls, hooks, BOX)  # 'auto': centred for Box actions
    # Every sampled action is made less likely: the raw loss widens the Gaussian
    # (descending the gradient raises log_std).
    assert raw < 0
    assert abs(auto) < abs(raw) / 5


def test_centering_is_for_box_actions_unless_asked():
    adv = torch.tensor([1.0, 2.0, 3.0])
    for space, setting, want in [(BOX, "auto", [-1.0, 0.0, 1.0]), (DISCRETE, "auto", [1.0, 2.0, 3.0]),
                                 (DISCRETE, True, [-1.0, 0.0, 1.0]), (BOX, False, [1.0, 2.0, 3.0])]:
        lrn = learner(ImpalaConfig, ImpalaTorchPolicy, space, center_advantages=setting)
        torch.testing.assert_close(centered(lrn, adv), torch.tensor(want))


def test_under_vtrace_the_baseline_goes_inside_the_importance_weights():
    """V-trace's advantages are ``rho * (q - V)``; the baseline must be weighted alike, or a
    stale sample (``rho`` near 0, where a narrow Gaussian's log-density has a gradient of
    order 1/sigma^2) gets the baseline's full weight."""
    lrn = learner(ImpalaConfig, ImpalaTorchPolicy, BOX)
    rhos = torch.tensor([1.0, 1.0, 0.0])
    adv = rhos * torch.tensor([1.0, 3.0, 5.0])
    # b = sum(rho (q - V)) / sum(rho) = 2; the stale third sample keeps its zero weight
    torch.testing.assert_close(centered(lrn, adv, rhos), torch.tensor([-1.0, 1.0, 0.0]))
    assert float(centered(lrn, adv)[2]) == pytest.approx(-4 / 3)  # the plain mean's weight
    on_policy = torch.tensor([1.0, 2.0, 3.0])  # every rho 1: the plain mean
    torch.testing.assert_close(centered(lrn, on_policy, torch.ones(3)), centered(lrn, on_policy))


def stale_mix_gradient(minibatch: bool, fresh_only: bool = False) -> torch.Tensor:
    """The policy-gradient term's gradient (no entropy, no value loss) on a batch of 4 envs
    x 5 steps: envs 0-1 sampled by the learner's own narrow Gaussian (std e^-4: rho 1),
    envs 2-3 stale (their actions 1.0 away, 25 std, where the runners' broad policy gave
    them log-density 0: rho about e^-300). ``fresh_only``: envs 0-1 alone."""
    lrn = learner(ImpalaConfig, ImpalaTorchPolicy, BOX, entropy_coeff=0.0,
                  minibatch_size=(10 if fresh_only else 20) if minibatch else None)
    with torch.no_grad():
        head = [p for p in lrn.model.parameters() if p.dim() == 1 and p.shape[0] == 2][0]
        head.add_(torch.tensor([0.0, -4.0]))
    batch = batch_of(lrn)
    batch["actions"][:, 2:] += 1.0
    batch["action_logp"][:, 2:] = 0.0
    if fresh_only:
        batch = {k: (v[:, :2] if v.dim() >= 2 and v.shape[:2] == (5, 4) else
                     v[:2] if k == "next_obs" else v) for k, v in batch.items()}
    lrn.model.zero_grad()
    loss, stats = lrn.loss(lrn.prepare_batch(batch))
    (loss - lrn.config.vf_loss_coeff * stats["vf_loss"]).backward()
    return torch.cat([p.grad.flatten() for p in lrn.model.parameters() if p.grad is not None])


@pytest.mark.parametrize("minibatch", [False, True], ids=["whole-batch", "minibatches"])
def test_stale_gaussian_samples_add_nothing_to_impalas_centred_policy_gradient(minibatch,
                                                                               monkeypatch):
    """With the baseline inside the weights the stale envs change nothing: the gradient is
    the fresh envs' alone, halved by the mean over twice the samples. Centred outside (the
    plain mean, as before) they got the baseline's weight at a log-density whose gradient
    is of order 1/sigma^2."""
    import rlmesh.algorithms.impala as impala

    mixed, fresh = stale_mix_gradient(minibatch), stale_mix_gradient(minibatch, fresh_only=True)
    torch.testing.assert_close(mixed, fresh / 2, rtol=1e-4, atol=1e-6)
    monkeypatch.setattr(impala, "pg_rhos", lambda *args: None)  # the plain mean, outside
    before = stale_mix_gradient(minibatch)
    assert float(before.abs().max()) > 10 * float(mixed.abs().max())

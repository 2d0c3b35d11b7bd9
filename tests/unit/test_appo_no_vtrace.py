"""RLlib's ``vtrace`` switch without processes: with ``vtrace=False`` APPO trains PPO's
clipped surrogate on GAE targets (``use_gae``, ``lambda``, ``use_critic``) with the ratio to
the behaviour policy, and IMPALA A3C's loss on the bootstrapped returns; the targets
checked against a case computed by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlmesh.algorithms import ConfigError
from rlmesh.algorithms.appo import APPOConfig, APPOTorchPolicy
from rlmesh.algorithms.impala import ImpalaConfig, ImpalaTorchPolicy, targets
from rlmesh.rl.gae import compute_gae
from tests.unit.test_impala_loss import learner, on_policy_batch


def hand_case() -> tuple[dict, torch.Tensor, torch.Tensor]:
    """Two envs, three steps, gamma 0.5. Env 0 runs on past the fragment (bootstrap 2.0);
    env 1 terminates at step 0 and is truncated at step 1 (its final observation worth
    4.0), and its last step bootstraps from 2.0."""
    batch = {"rewards": torch.tensor([[1.0, 1.0], [2.0, 1.0], [3.0, 1.0]]),
             "terminateds": torch.tensor([[False, True], [False, False], [False, False]]),
             "truncateds": torch.tensor([[False, False], [False, True], [False, False]])}
    values = torch.tensor([[0.5, 1.0], [1.0, 1.0], [1.5, 1.0]])
    bootstrap = torch.tensor([[9.0, 9.0], [9.0, 4.0], [2.0, 2.0]])  # 9.0: never read
    return batch, values, bootstrap


def hand_targets(cls, hooks, **training) -> tuple[torch.Tensor, torch.Tensor]:
    lrn = learner(cls, hooks, vtrace=False, gamma=0.5, **training)
    batch, values, bootstrap = hand_case()
    # Far from on-policy: without V-trace the ratios must not matter.
    target_logp = torch.full_like(values, -3.0)
    batch.update(action_logp=torch.zeros_like(values))
    return targets(lrn, batch, target_logp, values, bootstrap)


def test_appo_gae_targets_by_hand():
    value_targets, advantages = hand_targets(APPOConfig, APPOTorchPolicy, **{"lambda": 0.5})
    # env 0: deltas 1 + .5*1 - .5 = 1, 2 + .5*1.5 - 1 = 1.75, 3 + .5*2 - 1.5 = 2.5, carried
    # back by gamma*lambda = .25; env 1: 0 (terminated), 1 + .5*4 - 1 = 2 (truncated),
    # 1 + .5*2 - 1 = 1, none carried across the episode ends.
    want_adv = torch.tensor([[1.59375, 0.0], [2.375, 2.0], [2.5, 1.0]])
    torch.testing.assert_close(advantages, want_adv)
    torch.testing.assert_close(value_targets, want_adv + hand_case()[1])


def test_appo_without_gae_uses_the_bootstrapped_returns():
    value_targets, advantages = hand_targets(APPOConfig, APPOTorchPolicy, use_gae=False,
                                             **{"lambda": 0.5})  # lambda ignored
    # env 0 from step 0: 1 + .5*2 + .25*3 + .125*2 (the bootstrap) = 3; env 1: 1, 1 + .5*4, 1 + .5*2
    want = torch.tensor([[3.0, 1.0], [4.0, 3.0], [4.0, 2.0]])
    torch.testing.assert_close(value_targets, want)
    torch.testing.assert_close(advantages, want - hand_case()[1])


def test_appo_without_a_critic_uses_the_plain_discounted_returns():
    value_targets, advantages = hand_targets(APPOConfig, APPOTorchPolicy, use_gae=False,
                                             use_critic=False)
    want = torch.tensor([[2.75, 1.0], [3.5, 1.0], [3.0, 1.0]])  # nothing bootstrapped
    torch.testing.assert_close(advantages, want)
    torch.testing.assert_close(value_targets, want)


def test_impala_without_vtrace_is_a3c_on_the_bootstrapped_returns():
    value_targets, advantages = hand_targets(ImpalaConfig, ImpalaTorchPolicy)
    want = torch.tensor([[3.0, 1.0], [4.0, 3.0], [4.0, 2.0]])
    torch.testing.assert_close(value_targets, want)
    torch.testing.assert_close(advantages, want - hand_case()[1])
    # With V-trace the same off-policy batch gives other targets: the switch is read.
    lrn = learner(ImpalaConfig, ImpalaTorchPolicy, gamma=0.5)
    batch, values, bootstrap = hand_case()
    batch["action_logp"] = torch.zeros_like(values)
    vs, _ = targets(lrn, batch, torch.full_like(values, -3.0), values, bootstrap)
    assert not torch.allclose(vs, want)


def test_appo_surrogate_is_to_the_behaviour_policy_with_the_learners_gae():
    lrn = learner(APPOConfig, APPOTorchPolicy, vtrace=False, minibatch_size=4, use_kl_loss=True,
                  clip_param=0.2, entropy_coeff=0.0, **{"lambda": 0.9})
    batch = on_policy_batch(lrn)
    batch["action_logp"] = batch["action_logp"] - 0.5  # a stale sample: ratio e^0.5, clipped
    train = lrn.prepare_batch(batch)
    valid = batch["mask"].flatten()
    torch.testing.assert_close(train["old_logp"], batch["action_logp"].flatten()[valid])
    with torch.no_grad():  # GAE from the learner's own values, as PPO's
        t, b = batch["rewards"].shape
        values = lrn.model(batch["obs"].flatten(0, 1))[1].reshape(t, b)
        bootstrap = torch.zeros_like(values)
        bootstrap[t - 1] = lrn.model(batch["next_obs"])[1]
        idx = batch["trunc_index"]
        bootstrap[idx[:, 0], idx[:, 1]] = lrn.model(batch["trunc_obs"])[1]
        adv, returns = compute_gae(batch["rewards"], values, bootstrap, batch["terminateds"],
                                   batch["truncateds"], 0.99, 0.9)
    torch.testing.assert_close(train["pg_advantages"], adv.flatten()[valid])
    torch.testing.assert_close(train["vs"], returns.flatten()[valid])
    _, stats = lrn.loss(train)
    with torch.no_grad():
        inputs, _ = lrn.model(train["obs"])
        ratio = torch.exp(lrn.dist_class.from_inputs(inputs).logp(train["actions"])
                          - train["action_logp"])
        a = train["pg_advantages"]
        want = -torch.min(a * ratio, a * ratio.clamp(0.8, 1.2)).mean()
    assert float(stats["policy_loss"]) == pytest.approx(float(want), rel=1e-5)
    # (the clip fraction of minibatches: once per update, on the whole batch)
    assert float(lrn.update_stats(train, 4)["clip_fraction"]) == 1.0  # every ratio e^0.5 > 1.2
    assert float(stats["mean_kl_loss"]) == pytest.approx(0.0, abs=1e-6)  # KL to the behaviour


def test_appo_without_vtrace_trains_without_the_target_network():
    lrn = learner(APPOConfig, APPOTorchPolicy, vtrace=False, target_network_update_freq=1)
    batch = {k: v.numpy() for k, v in on_policy_batch(lrn).items()}
    stats = lrn.update(batch, 0, num_epochs=1)
    assert np.isfinite(stats["policy_loss"]) and np.isfinite(stats["vf_loss"])
    assert getattr(lrn, "target_model", None) is None and "num_target_updates" not in lrn.state


@pytest.mark.parametrize("cls,hooks", [(ImpalaConfig, ImpalaTorchPolicy),
                                       (APPOConfig, APPOTorchPolicy)])
def test_one_pass_equals_one_full_minibatch_without_vtrace(cls, hooks):
    """The time-major path (targets from the loss's own forward pass) and the minibatch
    path take the same step with vtrace=False too."""
    fused = learner(cls, hooks, vtrace=False)
    batch = {k: v.numpy() for k, v in on_policy_batch(fused).items()}
    batch["action_logp"] = batch["action_logp"] - 0.3
    split = learner(cls, hooks, vtrace=False, minibatch_size=int(batch["mask"].sum()))
    a, b = fused.update(batch, 0, num_epochs=1), split.update(batch, 0, num_epochs=1)
    for p, q in zip(fused.model.parameters(), split.model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    for key in ("total_loss", "policy_loss", "vf_loss"):
        assert a[key] == pytest.approx(b[key], rel=1e-5), key


def test_appo_without_a_critic_has_no_value_loss():
    lrn = learner(APPOConfig, APPOTorchPolicy, vtrace=False, use_gae=False, use_critic=False,
                  entropy_coeff=0.0)
    total, stats = lrn.loss(lrn.prepare_batch(on_policy_batch(lrn)))
    assert float(stats["vf_loss"]) > 0  # reported ...
    assert float(total.detach()) == pytest.approx(float(stats["policy_loss"]), rel=1e-6)  # ... not trained


def test_the_switch_and_its_settings_are_rllibs():
    assert ImpalaConfig().vtrace is True and APPOConfig().vtrace is True
    appo = APPOConfig()
    assert (appo.use_critic, appo.use_gae, appo.lambda_) == (True, True, 1.0)  # RLlib's APPO
    config = APPOConfig().environment("CartPole-v1").training(vtrace=False, use_critic=False)
    with pytest.raises(ConfigError, match="use_critic: GAE needs the value function"):
        config.validate()
    # Under V-trace the GAE keys are not read, as in RLlib: no complaint.
    APPOConfig().environment("CartPole-v1").training(use_critic=False).validate()
    with pytest.raises(ConfigError, match="lambda"):  # IMPALA has no lambda, as RLlib's
        ImpalaConfig().training(**{"lambda": 0.9})

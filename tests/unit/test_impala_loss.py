"""IMPALA's and APPO's learner hooks without processes: V-trace targets on a real learner's
batch (on-policy they are the n-step returns), dropping the last step, the target network,
the optimizers, schedules and the after_train_step hook."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmesh.algorithms.appo import APPOConfig, APPOTorchPolicy, target_model
from rlmesh.algorithms.impala import ImpalaConfig, ImpalaTorchPolicy, drop_last_step, valid_rows
from rlmesh.rl.gae import compute_gae
from rlmesh.rl.optim import Optimizers, RMSprop
from rlmesh.policy.torch_policy import TorchPolicy as Learner
from rlmesh.rl.batch import to_tensors
from tests.unit.test_learner import ACT, OBS, fragment

CALLS: list = []


def record_step(learner, stats) -> None:
    CALLS.append((learner.num_updates, dict(stats)))


def learner(cls=ImpalaConfig, hooks=ImpalaTorchPolicy, **training) -> Learner:
    config = cls().training(**{"model": {"fcnet_hiddens": [8], "vf_share_layers": False},
                               **training}).debugging(seed=0)
    torch.manual_seed(0)
    return hooks(OBS, ACT, config).for_learning()


def on_policy_batch(lrn: Learner, t: int = 6, b: int = 3) -> dict:
    """A fragment whose behaviour logp is the learner's own: V-trace's on-policy case."""
    f = fragment(t, b, terminated_at=(2, 1), truncated_at=(3, 2))
    f["obs"] = np.random.default_rng(1).normal(size=f["obs"].shape).astype(np.float32)
    f["actions"] = np.random.default_rng(2).integers(0, 2, (t, b))
    with torch.no_grad():
        inputs, _ = lrn.model(torch.as_tensor(f["obs"]).flatten(0, 1))
        logp = lrn.dist_class.from_inputs(inputs).logp(torch.as_tensor(f["actions"]).flatten())
    f["action_logp"] = logp.reshape(t, b).numpy()
    f["action_dist_inputs"] = inputs.reshape(t, b, -1).numpy()
    return to_tensors({k: v for k, v in f.items() if isinstance(v, np.ndarray)}, lrn.device)


def test_on_policy_vtrace_targets_are_the_n_step_returns():
    lrn = learner(minibatch_size=4)  # minibatches: V-trace computed before the loss
    batch = on_policy_batch(lrn)
    train = lrn.prepare_batch(batch)
    with torch.no_grad():
        t, b = batch["rewards"].shape
        values = lrn.model(batch["obs"].flatten(0, 1))[1].reshape(t, b)
        bootstrap = torch.zeros_like(values)
        bootstrap[t - 1] = lrn.model(batch["next_obs"])[1]
        idx = batch["trunc_index"]
        if len(idx):
            bootstrap[idx[:, 0], idx[:, 1]] = lrn.model(batch["trunc_obs"])[1]
        _, returns = compute_gae(batch["rewards"], values, bootstrap, batch["terminateds"],
                                 batch["truncateds"], lrn.config.gamma, 1.0)
    valid = batch["mask"].flatten()
    torch.testing.assert_close(train["vs"], returns.flatten()[valid], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(train["pg_advantages"].mean(), train["pg_advantages"].mean())
    assert len(train["obs"]) == int(valid.sum())


def test_drop_last_ts_bootstraps_from_the_dropped_row():
    lrn = learner(vtrace_drop_last_ts=True, minibatch_size=4)
    batch = on_policy_batch(lrn, t=5, b=3)
    short = drop_last_step(batch)
    assert short["rewards"].shape == (4, 3)
    torch.testing.assert_close(short["next_obs"], batch["obs"][4])
    assert (short["trunc_index"][:, 0] < 4).all()
    train = lrn.prepare_batch(batch)
    assert len(train["vs"]) == int(batch["mask"][:4].sum())


def test_an_update_trains_and_calls_after_train_step():
    CALLS.clear()
    lrn = learner(after_train_step="tests.unit.test_impala_loss:record_step",
                  entropy_coeff_schedule=[[0, 0.5], [1000, 0.0]], opt_type="rmsprop")
    assert isinstance(lrn.optimizer, RMSprop)
    before = [p.detach().clone() for p in lrn.model.parameters()]
    batch = on_policy_batch(lrn)
    stats = lrn.update({k: v.numpy() for k, v in batch.items()}, timesteps=500,
                                  num_epochs=1)
    assert stats["entropy_coeff"] == 0.25  # halfway down the schedule
    assert np.isfinite(stats["policy_loss"]) and np.isfinite(stats["vf_loss"])
    assert any(not torch.equal(p, q) for p, q in zip(lrn.model.parameters(), before))
    assert CALLS and CALLS[0][0] == 1 and "vf_loss" in CALLS[0][1]


def test_separate_value_optimizer_has_its_own_rate():
    lrn = learner(_separate_vf_optimizer=True, _lr_vf=1e-4, lr=1e-2)
    assert isinstance(lrn.optimizer, Optimizers)
    policy, value = lrn.optimizer.optimizers
    assert value.param_groups[0]["lr"] == 1e-4 and policy.param_groups[0]["lr"] == 1e-2
    names = {n for n, _ in lrn.model.named_parameters() if n.startswith("vf_")}
    assert len(value.params) == len(names) > 0


def test_appo_target_network_follows_every_nth_update():
    lrn = learner(APPOConfig, APPOTorchPolicy, target_network_update_freq=2, use_kl_loss=True)
    batch = {k: v.numpy() for k, v in on_policy_batch(lrn).items()}
    target = target_model(lrn)

    def same() -> bool:
        return all(torch.equal(p, q) for p, q in zip(target.parameters(), lrn.model.parameters()))
    assert same()
    stats = lrn.update(batch, 0, num_epochs=1)
    assert not same()  # one update: the target still holds the old policy
    assert np.isfinite(stats["mean_kl_loss"]) and stats["cur_kl_coeff"] > 0
    lrn.update(batch, 0, num_epochs=1)
    assert same() and lrn.state["num_target_updates"] == 1
    assert not any(p.requires_grad for p in target.parameters())


@pytest.mark.parametrize("padded", [False, True], ids=["no-padding", "padded"])
@pytest.mark.parametrize("cls,hooks", [(ImpalaConfig, ImpalaTorchPolicy),
                                       (APPOConfig, APPOTorchPolicy)])
def test_one_pass_over_the_whole_batch_equals_one_full_minibatch(cls, hooks, padded):
    """The time-major path (V-trace from the loss's own forward pass) and the minibatch
    path (V-trace first) take the same step when the minibatch is the whole batch, with
    padding rows (masked, as complete_episodes leaves them) and without (no selection)."""
    fused = learner(cls, hooks)
    batch = {k: v.numpy() for k, v in on_policy_batch(fused).items()}
    batch["action_logp"] = batch["action_logp"] - 0.3  # off-policy: ratios away from 1
    if padded:  # env 0's episode ended at row 3: rows 4-5 are padding
        batch["mask"][4:, 0] = False
        batch["terminateds"][3:, 0] = True
        batch["actions"][4:, 0] = 0
        batch["obs"][4:, 0] = 0.0
    rows = valid_rows(torch.as_tensor(batch["mask"]).flatten())
    assert isinstance(rows, torch.Tensor) if padded else rows == slice(None)
    n = int(batch["mask"].sum())
    split = learner(cls, hooks, minibatch_size=n)
    a = fused.update(batch, 0, num_epochs=1)
    b = split.update(batch, 0, num_epochs=1)
    for p, q in zip(fused.model.parameters(), split.model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    for key in ("total_loss", "policy_loss", "vf_loss", "entropy"):
        assert a[key] == pytest.approx(b[key], rel=1e-5), key
    assert a["num_env_steps_trained"] == b["num_env_steps_trained"] == n


@pytest.mark.parametrize("cls,hooks", [(ImpalaConfig, ImpalaTorchPolicy),
                                       (APPOConfig, APPOTorchPolicy)])
def test_behaviour_kl_is_zero_on_policy_and_grows_with_the_lag(cls, hooks):
    lrn = learner(cls, hooks)

    def behaviour_kl(batch) -> float:
        train = lrn.prepare_batch(batch)
        if "vs" in train:  # APPO's minibatches: once per update, on the whole batch
            return float(lrn.update_stats(train, len(train["vs"]))["behaviour_kl"])
        return float(lrn.loss(train)[1]["behaviour_kl"])
    batch = on_policy_batch(lrn)
    assert abs(behaviour_kl(batch)) < 1e-6
    stale = dict(batch, action_dist_inputs=batch["action_dist_inputs"] + torch.tensor([2.0, -2.0]))
    assert behaviour_kl(stale) > 0.1


@pytest.mark.parametrize("anchor", ["behaviour", "target"])
def test_appo_minibatch_statistics_are_the_whole_batchs_after_the_passes(anchor):
    """With minibatches APPO's diagnostics (entropy, the KLs, the clip fraction, the value
    function's explained variance) come from one pass over the batch after the update,
    not from every step: they are the policy's as it now stands against the batch."""
    lrn = learner(APPOConfig, APPOTorchPolicy, minibatch_size=6, num_epochs=2,
                  surrogate_anchor=anchor, use_kl_loss=True, clip_param=0.1)
    batch = {k: v.numpy() for k, v in on_policy_batch(lrn).items()}
    batch["action_logp"] = batch["action_logp"] - 0.3  # off-policy: ratios away from 1
    target_before = copy.deepcopy(target_model(lrn))
    stats = lrn.update(batch, 0)
    assert stats["num_grad_updates"] == 6  # 18 samples in minibatches of 6, two passes
    obs = torch.as_tensor(batch["obs"]).flatten(0, 1)
    actions = torch.as_tensor(batch["actions"]).flatten()
    with torch.no_grad():
        inputs, _ = lrn.model(obs)
        dist = lrn.dist_class.from_inputs(inputs)
        behaviour = lrn.dist_class.from_inputs(
            torch.as_tensor(batch["action_dist_inputs"]).flatten(0, 1))
        old = (behaviour if anchor == "behaviour"
               else lrn.dist_class.from_inputs(target_before(obs)[0]))
        mu = torch.as_tensor(batch["action_logp"]).flatten()
        ratio = torch.exp(dist.logp(actions) - mu)
        if anchor == "target":
            ratio = ratio * torch.exp(mu - old.logp(actions)).clamp(0.0, 2.0)
    assert stats["entropy"] == pytest.approx(float(dist.entropy().mean()), rel=1e-5)
    assert stats["behaviour_kl"] == pytest.approx(float(behaviour.kl(dist).mean()), rel=1e-4)
    assert stats["mean_kl_loss"] == pytest.approx(float(old.kl(dist).mean()), rel=1e-4, abs=1e-7)
    assert stats["clip_fraction"] == pytest.approx(float(((ratio - 1).abs() > 0.1).float().mean()))
    assert -1.0 <= stats["vf_explained_var"] <= 1.0 and stats["cur_kl_coeff"] > 0


def test_a_collapsed_discrete_policy_is_warned_about_once(caplog):
    import types

    from rlmesh.driver.iteration_result import warn_entropy_collapse as warn
    from rlmesh.env.registry import space_to_data

    algo = types.SimpleNamespace(policy_specs={"default_policy": {
        "action_space": space_to_data(gym.spaces.Discrete(2))}}, entropy_warned=set(),
        timesteps_total=354_000)
    warn(algo, {"default_policy": {"entropy": 0.3}})
    assert not caplog.records
    warn(algo, {"default_policy": {"entropy": 0.001}})
    warn(algo, {"default_policy": {"entropy": 0.0005}})
    assert len(caplog.records) == 1
    assert "entropy fell to 0.0010" in caplog.text and "354,000" in caplog.text

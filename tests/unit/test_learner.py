"""The learner without processes: merging fragments, PPO's batch preparation and KL
adaptation, gradient clipping, state round trip."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmesh.algorithms.ppo import PPOConfig, PPOTorchPolicy
from rlmesh.policy.learner_stats import explained_variance, mean_stats
from rlmesh.rl.columns import merge_fragments

OBS = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
ACT = gym.spaces.Discrete(2)


def fragment(t: int, b: int, start: float = 0.0, terminated_at: tuple[int, int] | None = None,
             truncated_at: tuple[int, int] | None = None) -> dict:
    obs = (start + np.arange(t * b * 2, dtype=np.float32)).reshape(t, b, 2)
    f = {
        "obs": obs, "actions": np.zeros((t, b), np.int64),
        "action_logp": np.full((t, b), np.log(0.5), np.float32),
        "action_dist_inputs": np.zeros((t, b, 2), np.float32),
        "rewards": np.ones((t, b), np.float32),
        "terminateds": np.zeros((t, b), bool), "truncateds": np.zeros((t, b), bool),
        "mask": np.ones((t, b), bool),
        "next_obs": np.full((b, 2), 100 + start, np.float32),
        "trunc_index": np.zeros((0, 2), np.int64), "trunc_obs": np.zeros((0, 2), np.float32),
    }
    if terminated_at:
        f["terminateds"][terminated_at] = True
    if truncated_at:
        f["truncateds"][truncated_at] = True
        f["trunc_index"] = np.array([truncated_at], np.int64)
        f["trunc_obs"] = np.full((1, 2), -7, np.float32)
    return f


def test_merge_pads_short_fragments_and_bootstraps_their_open_columns():
    long = fragment(3, 2, truncated_at=(0, 1))
    short = fragment(2, 2, start=50, terminated_at=(1, 0))
    batch = merge_fragments([long, short])
    assert batch["obs"].shape == (3, 4, 2)
    # The short fragment's padding row: masked out and cut off from the recursion.
    assert not batch["mask"][2, 2:].any() and batch["terminateds"][2, 2:].all()
    # Its column 1 was still running at its last real row: now a truncation that
    # bootstraps from that fragment's next_obs; column 0 terminated and needs nothing.
    assert batch["truncateds"][1, 3] and not batch["truncateds"][1, 2]
    rows = {tuple(i): o.tolist() for i, o in zip(batch["trunc_index"], batch["trunc_obs"])}
    assert rows == {(0, 1): [-7.0, -7.0], (1, 3): [150.0, 150.0]}
    assert batch["next_obs"].shape == (4, 2)


def make_learner(**training) -> PPOTorchPolicy:
    cfg = PPOConfig().training(minibatch_size=4, num_epochs=2, **training)
    return PPOTorchPolicy(OBS, ACT, cfg).for_learning()


def test_prepare_batch_keeps_only_valid_steps_and_normalises_advantages():
    learner = make_learner()
    f = fragment(3, 2)
    f["mask"][2, 1] = False
    batch = {k: torch.as_tensor(v) for k, v in f.items()}
    train = learner.prepare_batch(batch)
    assert len(train["advantages"]) == 5
    assert abs(float(train["advantages"].mean())) < 1e-5
    assert float(train["advantages"].std()) == pytest.approx(1.0, abs=1e-4)


def test_kl_coefficient_adapts_toward_the_target():
    learner = make_learner(use_kl_loss=True, kl_coeff=0.2, kl_target=0.01)
    learner.after_update({"mean_kl_loss": 0.05})
    assert learner.state["cur_kl_coeff"] == pytest.approx(0.3)
    learner.after_update({"mean_kl_loss": 0.001})
    assert learner.state["cur_kl_coeff"] == pytest.approx(0.15)
    learner.after_update({"mean_kl_loss": 0.01})
    assert learner.state["cur_kl_coeff"] == pytest.approx(0.15)


@pytest.mark.parametrize("mode", ["value", "norm", "global_norm"])
def test_gradient_clipping_modes(mode):
    learner = make_learner(grad_clip=1e-3, grad_clip_by=mode)
    for p in learner.model.parameters():
        p.grad = torch.full_like(p, 5.0)
    learner._clip_gradients()
    grads = [p.grad for p in learner.model.parameters()]
    if mode == "value":
        assert all(float(g.abs().max()) <= 1e-3 + 1e-9 for g in grads)
    elif mode == "norm":
        assert all(float(g.norm()) <= 1e-3 * 1.0001 for g in grads)
    else:
        assert float(torch.nn.utils.get_total_norm(grads)) <= 1e-3 * 1.0001


def test_update_then_state_round_trip():
    learner = make_learner(lr=1e-2)
    before = {k: v.clone() for k, v in learner.model.state_dict().items()}
    stats = learner.update(merge_fragments([fragment(4, 2), fragment(4, 2, start=9)]), 16)
    assert stats["num_env_steps_trained"] == 16 and stats["num_grad_updates"] == 8
    assert any(not torch.equal(before[k], v) for k, v in learner.model.state_dict().items())
    other = make_learner(lr=1e-2)
    other.set_state(learner.get_state())
    for k, v in learner.model.state_dict().items():
        assert torch.equal(other.model.state_dict()[k], v)
    assert other.num_updates == 1 and other.state == learner.state


def test_weights_handed_out_do_not_follow_later_updates():
    """Published weights are encoded (or sent without a copy) after the next update may
    have begun: they must be a copy of the parameters, not their memory."""
    learner = make_learner(lr=1e-2)
    learner.update(merge_fragments([fragment(4, 2)]), 8)  # optimizer state exists
    weights, state = learner.get_weights(), learner.get_state()
    kept = {k: v.copy() for k, v in weights.items()}
    kept_state = {k: v.clone() for k, v in state["model"].items()}
    kept_moments = [s["exp_avg"].clone() for s in state["optimizer"]["state"].values()]
    learner.update(merge_fragments([fragment(4, 2, start=3)]), 16)
    changed = learner.get_weights()
    assert any(not np.array_equal(changed[k], kept[k]) for k in kept)  # it did train
    for k, v in weights.items():
        np.testing.assert_array_equal(v, kept[k])
    for k, v in state["model"].items():
        assert torch.equal(v, kept_state[k]), k
    for saved, moment in zip(state["optimizer"]["state"].values(), kept_moments):
        assert torch.equal(saved["exp_avg"], moment)


class RecordingPPO(PPOTorchPolicy):
    """PPO that writes down each minibatch loss's statistics as numbers."""

    def loss(self, mb):
        total, stats = super().loss(mb)
        self.seen.append({k: float(v) for k, v in stats.items()})
        return total, stats


def test_update_reports_each_statistic_as_its_mean_over_the_gradient_steps():
    cfg = PPOConfig().training(minibatch_size=4, num_epochs=3, grad_clip=0.5)
    learner = RecordingPPO(OBS, ACT, cfg).for_learning()
    learner.seen = []
    result = learner.update(merge_fragments([fragment(3, 4, terminated_at=(1, 2))]), 0)
    assert result["num_grad_updates"] == len(learner.seen) == 9  # 12 samples, 3 epochs of 3
    for key in learner.seen[0]:
        assert result[key] == pytest.approx(np.mean([s[key] for s in learner.seen]), rel=1e-6), key
    assert 0 < result["gradients_norm"] and isinstance(result["vf_explained_var"], float)


class KeepingPPO(PPOTorchPolicy):
    """PPO that keeps the batch its diagnostics were computed on."""

    def update_stats(self, train, chunk):
        self.kept = train
        return super().update_stats(train, chunk)


def test_diagnostics_describe_the_policy_after_the_update_over_the_whole_batch():
    cfg = PPOConfig().training(minibatch_size=4, num_epochs=3, lr=0.05, use_kl_loss=True)
    learner = KeepingPPO(OBS, ACT, cfg).for_learning()
    result = learner.update(merge_fragments([fragment(3, 4, terminated_at=(1, 2))]), 0)
    train = learner.kept
    with torch.no_grad():
        logits, values = learner.model(train["obs"])  # 12 rows; computed in chunks of 4
    logp = torch.log_softmax(logits, -1)
    behaviour = torch.log_softmax(train["action_dist_inputs"], -1)
    kl = (behaviour.exp() * (behaviour - logp)).sum(-1).mean()
    ratio = torch.exp(logp.gather(1, train["actions"][:, None])[:, 0] - train["action_logp"])
    assert result["mean_kl_loss"] == pytest.approx(float(kl), rel=1e-5) and float(kl) > 1e-4
    assert result["entropy"] == pytest.approx(float(-(logp.exp() * logp).sum(-1).mean()), rel=1e-5)
    assert result["clip_fraction"] == pytest.approx(float(((ratio - 1).abs() > 0.2).float().mean()))
    assert result["vf_explained_var"] == pytest.approx(
        float(explained_variance(train["value_targets"], values)), rel=1e-5, abs=1e-6)
    # the KL coefficient adapts on that KL, the update's own (as in the PPO paper)
    expected = 0.2 * (1.5 if float(kl) > 2 * cfg.kl_target else 0.5 if float(kl) < 0.5 * cfg.kl_target
                      else 1.0)
    assert learner.state["cur_kl_coeff"] == pytest.approx(expected)


def test_mean_stats_takes_tensors_and_numbers_and_keys_some_steps_lack():
    steps = [{"a": torch.tensor(1.0), "b": 2.0}, {"a": torch.tensor([3.0], dtype=torch.float64)},
             {"a": torch.tensor(5.0), "b": torch.tensor(4)}]
    assert mean_stats(steps) == {"a": 3.0, "b": 3.0}
    assert mean_stats([]) == {}


def test_explained_variance_is_zero_for_constant_targets_or_one_sample():
    values = torch.tensor([0.5, 1.5, 2.0])
    assert float(explained_variance(torch.ones(3), values)) == 0.0
    assert float(explained_variance(torch.ones(1), values[:1])) == 0.0
    targets = torch.tensor([1.0, 2.0, 2.5])
    expected = 1 - float((targets - values).var() / targets.var())
    assert float(explained_variance(targets, values)) == pytest.approx(expected)

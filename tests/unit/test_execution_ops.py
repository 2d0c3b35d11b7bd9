"""rlmesh.execution's data operators without processes: LocalIterator's chaining, and
ConcatBatches, SelectExperiences, StandardizeFields and warn_about_bad_reward_scales on
fragments and results laid out as runners and train() make them."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from rlmesh.execution import LocalIterator, metric_ops, rollout_ops
from rlmesh.execution.metric_ops import warn_about_bad_reward_scales
from rlmesh.execution.rollout_ops import (ConcatBatches, Fragments, SelectExperiences,
                                          StandardizeFields)


def fragment(steps: int, envs: int = 1, policy_id: str = "default_policy",
             padded: int = 0) -> dict:
    """A time-major fragment [T, B] of ``steps`` x ``envs``, its last ``padded`` rows masked."""
    rng = np.random.default_rng(steps * 31 + envs)
    mask = np.ones((steps, envs), bool)
    mask[steps - padded:] = False
    return {"obs": rng.normal(size=(steps, envs, 4)).astype(np.float32),
            "rewards": rng.normal(5.0, 3.0, size=(steps, envs)).astype(np.float32),
            "terminateds": np.zeros((steps, envs), bool),
            "truncateds": np.zeros((steps, envs), bool),
            "mask": mask, "next_obs": np.zeros((envs, 4), np.float32),
            "trunc_index": np.zeros((0, 2), np.int64), "trunc_obs": np.zeros((0, 4), np.float32),
            "env_steps": int(mask.sum()), "policy_id": policy_id}


def test_local_iterator_chains_lazily_and_flattens_with_combine():
    pulled = []

    def source():
        for i in range(10):
            pulled.append(i)
            yield i

    it = LocalIterator(source()).for_each(lambda x: x * 2).combine(lambda x: [x] * (x % 4 == 0))
    assert pulled == []  # nothing runs before an item is pulled
    assert it.take(3) == [0, 4, 8] and pulled == [0, 1, 2, 3, 4]
    assert list(LocalIterator(range(6)).filter(lambda x: x % 2)) == [1, 3, 5]
    assert next(LocalIterator([(1, {"a": 1})]).for_each(lambda t: t[1])) == {"a": 1}
    with pytest.raises(TypeError, match="flatten/combine takes lists of items, got int"):
        next(LocalIterator(range(3)).combine(lambda x: x))
    with pytest.raises(TypeError, match="for_each takes a function"):
        LocalIterator([]).for_each(42)


def test_concat_batches_joins_rounds_until_the_train_batch_is_full():
    concat = ConcatBatches(min_batch_size=250)
    rounds = [Fragments([fragment(50), fragment(50)]) for _ in range(3)]
    out = [concat(r) for r in rounds]
    assert out[0] == [] and out[1] == []
    (joined,) = out[2]
    assert isinstance(joined, Fragments) and len(joined) == 6 and joined.count == 300
    assert concat(Fragments([fragment(50)])) == []  # the next batch starts afresh
    assert joined.policy_batches["default_policy"]["obs"].shape == (50, 6, 4)


def test_select_experiences_keeps_the_named_policies_steps():
    mixed = Fragments([fragment(20, policy_id="learner"), fragment(20, policy_id="fixed")])
    multi = {"policy_batches": {"learner": fragment(10, policy_id="learner"),
                                "fixed": fragment(10, policy_id="fixed")}, "env_steps": 10,
             "policy_id": "learner"}
    kept = SelectExperiences(["learner"])(Fragments([*mixed, multi]))
    assert [f.get("policy_id") for f in kept] == ["learner", "learner"]
    assert list(kept[1]["policy_batches"]) == ["learner"]
    assert SelectExperiences(["nobody"])(mixed) == []
    with pytest.raises(TypeError, match="write \\['learner'\\]"):
        SelectExperiences("learner")


def test_standardize_fields_uses_real_steps_and_leaves_learner_columns_to_it(monkeypatch, caplog):
    batch = Fragments([fragment(30, envs=2, padded=5), fragment(30, envs=2)])
    out = StandardizeFields(["rewards"])(batch)
    real = np.concatenate([f["rewards"][f["mask"]] for f in out])
    assert abs(real.mean()) < 1e-5 and abs(real.std() - 1) < 1e-4
    assert out[0]["rewards"].dtype == np.float32
    monkeypatch.setattr(rollout_ops, "_said", set())
    with caplog.at_level(logging.WARNING, logger="rlmesh.execution.rollout_ops"):
        for _ in range(2):
            assert StandardizeFields(["advantages"])(batch) is batch
    assert len([r for r in caplog.records if "advantages on the learner" in r.getMessage()]) == 1
    with pytest.raises(KeyError) as missing:
        StandardizeFields(["returns"])(batch)
    assert str(missing.value) == (
        "StandardizeFields: policy 'default_policy''s batch has no column 'returns' (it has "
        "mask, obs, rewards, terminateds, truncateds)")


def test_bad_reward_scales_are_said_once_and_the_result_passes(monkeypatch, caplog):
    monkeypatch.setattr(metric_ops, "_warned", set())
    config = {"vf_clip_param": 10.0, "model": {"vf_share_layers": True}, "vf_loss_coeff": 1.0}
    fine = {"episode_reward_mean": 150.0,
            "info": {"learner": {"default_policy": {"vf_loss": 3.0, "policy_loss": 0.1}}}}
    huge = {"episode_reward_mean": -5000.0,
            "info": {"learner": {"default_policy": {"vf_loss": 400.0, "policy_loss": 0.1}}}}
    with caplog.at_level(logging.WARNING, logger="rlmesh.execution.metric_ops"):
        assert warn_about_bad_reward_scales(config, fine) is fine
        assert caplog.records == []
        for _ in range(3):
            assert warn_about_bad_reward_scales(config, huge) is huge
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and "500x vf_clip_param" in said[0] and "vf_loss_coeff" in said[1]
    # No episode yet (NaN), or no clipping (None): nothing to compare.
    assert warn_about_bad_reward_scales({"vf_clip_param": None},
                                        {"episode_reward_mean": float("nan")})


def test_plan_config_reads_the_trainer_era_keys_a_plan_reads():
    from rlmesh.algorithms.execution import PlanConfig
    from rlmesh.algorithms.ppo import PPOConfig
    from rlmesh.config.settings import ConfigError

    config = PlanConfig(PPOConfig().training(train_batch_size=600))
    assert config["simple_optimizer"] is True  # rlmesh's one update path: TrainOneStep's
    assert config["train_batch_size"] == config.train_batch_size == 600
    assert config["num_sgd_iter"] == PPOConfig().num_epochs
    assert config["sgd_minibatch_size"] == PPOConfig().minibatch_size
    with pytest.raises(ConfigError, match="unknown config key 'sgd_minibatch'"):
        config["sgd_minibatch"]

"""Seed 003's pieces that need no process: compute_advantages' numbers, RLlib's SampleBatch
columns, the model's from_batch/value_function, the template's acting functions by RLlib's
arities, how a runner calls a policy and carries string outputs, and each bad input's line."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmesh.algorithms.algorithm_template import build_algorithm
from rlmesh.algorithms.execution import plan_step
from rlmesh.algorithms.ppo import PPO, PPOTorchPolicy
from rlmesh.config.base import AlgorithmConfig
from rlmesh.evaluation.postprocessing import Postprocessing, compute_advantages
from rlmesh.policy.policy import Policy
from rlmesh.policy.sample_batch import SampleBatch
from rlmesh.policy.torch_policy_template import build_policy_class, build_torch_policy
from rlmesh.roles.runner_policy import actions_caller
from rlmesh.wire.codec import DecodeError, decode, encode

OBS, ACTS = gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2)


def pg_loss(policy, model, dist_class, train_batch):
    logits, _ = model.from_batch(train_batch)
    return -dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS]).mean()


# --- compute_advantages, SampleBatch ---

def test_compute_advantages_discounted_returns_and_gae():
    batch = SampleBatch({"rewards": np.array([1.0, 1.0, 1.0], np.float32),
                         "actions": np.zeros(3, np.int64)})
    out = compute_advantages(batch, 0.0, 0.5, use_gae=False)
    np.testing.assert_allclose(out[Postprocessing.ADVANTAGES], [1.75, 1.5, 1.0])
    np.testing.assert_allclose(out[Postprocessing.VALUE_TARGETS], [0, 0, 0])
    batch[SampleBatch.VF_PREDS] = np.array([0.5, 0.5, 0.5], np.float32)
    out = compute_advantages(batch, 2.0, 0.5, lambda_=1.0)  # GAE at lambda 1: returns - V
    returns = np.array([1 + .5 + .25 + .125 * 2, 1 + .5 + .25 * 2, 1 + .5 * 2])
    np.testing.assert_allclose(out[Postprocessing.ADVANTAGES], returns - 0.5, rtol=1e-6)
    np.testing.assert_allclose(out[Postprocessing.VALUE_TARGETS], returns, rtol=1e-6)
    out = compute_advantages(batch, 2.0, 0.5, use_gae=False)  # use_critic: minus vf_preds
    np.testing.assert_allclose(out[Postprocessing.ADVANTAGES], returns - 0.5, rtol=1e-6)


def test_sample_batch_derives_dones_and_per_step_new_obs():
    traj = SampleBatch({"obs": np.arange(3.0)[:, None], "next_obs": np.array([3.0]),
                        "terminateds": np.array([False, False, True]),
                        "truncateds": np.array([False, True, False])})
    assert traj[SampleBatch.DONES].tolist() == [False, True, True]
    assert traj[SampleBatch.NEXT_OBS][:, 0].tolist() == [1.0, 2.0, 3.0]
    assert SampleBatch.CUR_OBS == "obs" and SampleBatch.VF_PREDS == "vf_preds"


# --- the template's policy and model ---

def test_from_batch_value_function_and_dist_class_with_model():
    MyTorchPolicy = build_torch_policy(name="MyTorchPolicy", loss_fn=pg_loss)
    policy = MyTorchPolicy(OBS, ACTS, AlgorithmConfig())
    with pytest.raises(RuntimeError, match="after a forward pass"):
        policy.model.value_function()
    batch = {"obs": torch.zeros(4, 3), "actions": torch.zeros(4, dtype=torch.long)}
    logits, state = policy.model.from_batch(batch)
    assert logits.shape == (4, 2) and state == []
    assert policy.model.value_function().shape == (4,)
    dist = policy.dist_class(logits, policy.model)
    assert dist.entropy().shape == (4,) and dist.logp(batch["actions"]).shape == (4,)
    loss, stats = policy.loss(batch)
    assert torch.isfinite(loss) and "total_loss" in stats


@pytest.mark.parametrize("returns", [2, 3, 4])
def test_action_sampler_fn_by_each_of_rllibs_arities(returns):
    def sampler(policy, model, input_dict, state_batches, explore=None, timestep=None):
        n = len(input_dict["obs"])
        out = (np.ones(n, np.int64), np.zeros(n, np.float32), np.zeros((n, 2), np.float32), [])
        return {2: out[:2], 3: (out[0], out[1], []), 4: out}[returns]

    policy = build_torch_policy(name="P", loss_fn=pg_loss, action_sampler_fn=sampler)(
        OBS, ACTS, AlgorithmConfig())
    actions, states, extras = policy.compute_actions(np.zeros((5, 3), np.float32))
    assert actions.tolist() == [1] * 5 and states == [] and "action_logp" in extras


def test_extra_action_out_fn_with_four_arguments_reads_the_acting_values():
    def values(policy, input_dict, state_batches, model):
        return {SampleBatch.VF_PREDS: model.value_function().cpu().numpy()}

    policy = build_torch_policy(name="P", loss_fn=pg_loss, extra_action_out_fn=values)(
        OBS, ACTS, AlgorithmConfig())
    _, _, extras = policy.compute_actions(np.zeros((5, 3), np.float32))
    assert extras[SampleBatch.VF_PREDS].shape == (5,)


# --- the runner's call and string outputs ---

class SeedSignature(Policy):
    def compute_actions(self, obs_batch, state_batches, prev_action_batch=None,
                        prev_reward_batch=None, info_batch=None, episodes=None, **kwargs):
        return [0 for _ in obs_batch], [], {"s": ["foo" for _ in obs_batch],
                                            "i": [7 for _ in obs_batch]}

    def learn_on_batch(self, samples):
        return {}


class NoKwargs(Policy):
    def compute_actions(self, obs_batch):  # neither state nor explore
        return np.zeros(len(obs_batch), np.int64), [], {"bad": [object()] * len(obs_batch)}


def test_runner_calls_rllibs_signature_and_strings_become_object_columns():
    call = actions_caller(SeedSignature(OBS, ACTS, AlgorithmConfig()))
    actions, _, extras = call(np.zeros((2, 3), np.float32), None, None, None, True)
    assert extras["s"].dtype == object and extras["s"].tolist() == ["foo", "foo"]
    assert extras["i"].dtype.kind == "i"
    back = decode(encode(extras))
    assert back["s"].tolist() == ["foo", "foo"] and back["i"].tolist() == [7, 7]


def test_an_extra_output_that_cannot_cross_the_wire_is_one_line_naming_its_key():
    call = actions_caller(NoKwargs(OBS, ACTS, AlgorithmConfig()))
    with pytest.raises(TypeError, match=r"extra output 'bad' cannot reach the learner"):
        call(np.zeros((2, 3), np.float32), None, None, None, True)
    with pytest.raises(TypeError, match="takes 1 inputs.*take state_batches"):
        call(np.zeros((2, 3), np.float32), [np.zeros(2)], None, None, True)


def test_a_torch_policys_string_output_is_refused_naming_the_key():
    def strings(policy, input_dict, state_batches, model):
        return {"label": ["x"] * len(input_dict["obs"])}

    policy = build_torch_policy(name="P", loss_fn=pg_loss, extra_action_out_fn=strings)(
        OBS, ACTS, AlgorithmConfig())
    with pytest.raises(TypeError, match="extra output 'label' holds <U1 values; a TorchPolicy"):
        actions_caller(policy)(np.zeros((2, 3), np.float32), None, None, None, True)


def test_a_malformed_object_array_frame_is_refused():
    frames = encode(np.array(["a", "b"], dtype=object))
    assert decode(frames).tolist() == ["a", "b"]
    import msgpack

    bad = msgpack.packb(msgpack.ExtType(6, msgpack.packb([[3], ["a"]])))
    with pytest.raises(DecodeError, match="has 1 entries"):
        decode([bad])


# --- bad input: one line each ---

def test_tensorflow_names_are_one_line_naming_the_torch_spelling():
    from rlmesh.policy.tf_policy_template import build_tf_policy

    with pytest.raises(NotImplementedError, match="use rlmesh.policy.torch_policy_template"):
        build_tf_policy(name="MyTFPolicy", loss_fn=pg_loss)
    with pytest.raises(ValueError, match="write framework='torch'"):
        build_policy_class("P", "tf", loss_fn=pg_loss)
    with pytest.raises(TypeError, match="TensorFlow template keyword; .* use extra_action_out_fn"):
        build_torch_policy(name="P", loss_fn=pg_loss, extra_action_fetches_fn=lambda p: {})
    with pytest.raises(ImportError, match="write the iteration as training_step"):
        from rlmesh.execution.concurrency_ops import Concurrently  # noqa: F401


def test_unknown_template_keywords_list_the_known_ones():
    with pytest.raises(TypeError, match="unknown keyword 'loss_function'; .*extra_grad_process_fn"):
        build_torch_policy(name="P", loss_function=pg_loss)
    with pytest.raises(TypeError, match="needs loss_fn"):
        build_torch_policy(name="P")
    with pytest.raises(TypeError, match="unknown arguments \\['loss_fn'\\]; it takes name"):
        PPO.with_updates(loss_fn=pg_loss)
    from rlmesh.agents.trainer_template import build_trainer

    with pytest.raises(TypeError, match="unknown keyword\\(s\\) \\['validate_env'\\]"):
        build_trainer(name="T", validate_env=None)
    with pytest.raises(TypeError, match="not a TorchPolicy.*override its methods"):
        SeedSignature.with_updates(loss_fn=pg_loss)
    with pytest.raises(TypeError, match="training_step or execution_plan, not both"):
        build_algorithm("A", training_step=lambda a: {}, execution_plan=lambda w, c: iter(()))


def test_with_updates_derives_from_builtin_classes():
    Derived = PPOTorchPolicy.with_updates(name="Derived", loss_fn=pg_loss)
    assert issubclass(Derived, PPOTorchPolicy) and Derived.__name__ == "Derived"
    assert Derived.loss is not PPOTorchPolicy.loss
    assert Derived.prepare_batch is PPOTorchPolicy.prepare_batch  # no postprocess_fn: PPO's GAE
    Again = Derived.with_updates(name="Again", postprocess_fn=lambda p, b, o=None, e=None: b)
    assert Again._template_base is PPOTorchPolicy and Again.loss is not PPOTorchPolicy.loss
    Trainer = PPO.with_updates(name="Trainer", default_policy=Derived)
    assert issubclass(Trainer, PPO) and Trainer.default_policy_class is Derived


def test_an_execution_plan_item_that_is_not_statistics_is_one_line():
    class Algo:
        config, learner_group, env_runners = AlgorithmConfig(), None, None

    def plan(workers, config):
        yield {"episode_reward_mean": 1.0}

    with pytest.raises(TypeError, match="gave dict; each item is the iteration's learner"):
        plan_step(Algo(), plan)
    with pytest.raises(RuntimeError, match="ran out"):
        plan_step(Algo(), lambda w, c: iter(()))

"""The policies and algorithms of RLlib's "How To Customize Policies" page, written as an RLlib
user writes them with ``ray.rllib`` -> ``rlmesh`` (our own code, not the page's): a policy
from scratch, recurrent state of plain ints, extra outputs of strings and ints, the torch
template with a policy-gradient loss and postprocessing, an A3C-like template with every hook,
and with_updates on PPO. Module level: runner and learner processes import them by path."""

from __future__ import annotations

import numpy as np
import torch

from rlmesh.agents.a3c import A3CTrainer
from rlmesh.agents.trainer_template import build_trainer
from rlmesh.algorithms.execution import parallel_rollouts, train_one_step
from rlmesh.algorithms.ppo import PPO, PPOTorchPolicy
from rlmesh.evaluation.postprocessing import Postprocessing, compute_advantages
from rlmesh.policy.policy import Policy
from rlmesh.policy.sample_batch import SampleBatch
from rlmesh.policy.torch_policy_template import build_torch_policy

TINY = {"train_batch_size": 100, "num_workers": 1, "rollout_fragment_length": 50}

# --- a policy from scratch: RLlib's compute_actions signature, no default for state_batches ---


class ScratchPolicy(Policy):
    def __init__(self, observation_space, action_space, config):
        Policy.__init__(self, observation_space, action_space, config)
        self.w = 1.0

    def compute_actions(self, obs_batch, state_batches, prev_action_batch=None,
                        prev_reward_batch=None, info_batch=None, episodes=None, **kwargs):
        return [self.action_space.sample() for _ in obs_batch], [], {}

    def learn_on_batch(self, samples):
        self.w += 1.0
        return {"rows": float(len(samples[SampleBatch.ACTIONS])), "w": self.w,
                "columns": float(all(k in samples for k in ("obs", "actions", "rewards")))}

    def get_weights(self):
        return {"w": self.w}

    def set_weights(self, weights):
        self.w = weights["w"]


class StepCounterPolicy(ScratchPolicy):
    """The episode's step counter as recurrent state of plain ints."""

    def get_initial_state(self):
        return [0]

    def compute_actions(self, obs_batch, state_batches, prev_action_batch=None,
                        prev_reward_batch=None, info_batch=None, episodes=None, **kwargs):
        assert len(state_batches) == len(self.get_initial_state())
        counters = [[t + 1 for t in state_batches[0]]]
        return [self.action_space.sample() for _ in obs_batch], counters, {}

    def learn_on_batch(self, samples):
        state_in, state_out = samples["state_in_0"], samples["state_out_0"]
        return {"state_rows": float(len(state_in)),
                "out_is_in_plus_one": float(np.all(state_out == state_in + 1)),
                "max_count": float(state_out.max())}


class ExtraOutputsPolicy(ScratchPolicy):
    """Strings and ints as extra outputs, one per observation."""

    def compute_actions(self, obs_batch, state_batches, prev_action_batch=None,
                        prev_reward_batch=None, info_batch=None, episodes=None, **kwargs):
        extra = {"tag": ["abc" for _ in obs_batch], "code": [4242 for _ in obs_batch]}
        return [self.action_space.sample() for _ in obs_batch], [], extra

    def learn_on_batch(self, samples):
        tags, codes = samples["tag"], samples["code"]
        return {"tag_rows": float(sum(t == "abc" for t in tags)),
                "code_rows": float(np.sum(codes == 4242)), "rows": float(len(codes))}


ScratchTrainer = build_trainer(name="ScratchTrainer", default_policy=ScratchPolicy,
                               default_config=TINY)

# --- the torch template: a policy-gradient loss over postprocessed advantages ---


def pg_postprocess(policy, sample_batch, other_agent_batches=None, episode=None):
    return compute_advantages(sample_batch, 0.0, policy.config["gamma"], use_gae=False)


def pg_loss(policy, model, dist_class, train_batch):
    logits, _ = model.from_batch(train_batch)
    action_dist = dist_class(logits, model)
    return -torch.mean(action_dist.logp(train_batch[SampleBatch.ACTIONS])
                       * train_batch[Postprocessing.ADVANTAGES])


PGTorchPolicy = build_torch_policy(name="PGTorchPolicy", loss_fn=pg_loss,
                                   postprocess_fn=pg_postprocess)
PGTrainer = build_trainer(
    name="PGTrainer", default_policy=PGTorchPolicy,
    default_config={"train_batch_size": 1000, "lr": 0.01, "num_workers": 1,
                    "batch_mode": "complete_episodes", "num_sgd_iter": 1,
                    "sgd_minibatch_size": 1000})

# --- an A3C-like template: value predictions out, advantages in, clipping, own optimizer ---


class ValueMixin:
    def _value(self, obs):
        with torch.no_grad():
            self.model(torch.as_tensor(np.asarray(obs, np.float32))[None])
            return float(self.model.value_function()[0])


def value_predictions(policy, input_dict, state_batches, model):
    return {SampleBatch.VF_PREDS: model.value_function().cpu().numpy()}


def gae_postprocess(policy, sample_batch, other_agent_batches=None, episode=None):
    last_r = 0.0 if sample_batch[SampleBatch.DONES][-1] else policy._value(
        sample_batch[SampleBatch.NEXT_OBS][-1])
    return compute_advantages(sample_batch, last_r, policy.config["gamma"],
                              policy.config["lambda"])


def actor_critic_loss(policy, model, dist_class, train_batch):
    logits, _ = model.from_batch(train_batch)
    values = model.value_function()
    dist = dist_class(logits)
    logp = dist.logp(train_batch[SampleBatch.ACTIONS])
    policy.entropy = dist.entropy().mean()
    policy.pi_err = -torch.mean(logp * train_batch[Postprocessing.ADVANTAGES])
    policy.value_err = torch.mean((values - train_batch[Postprocessing.VALUE_TARGETS]) ** 2)
    policy.vf_preds_seen = float(train_batch[SampleBatch.VF_PREDS].abs().sum() > 0)
    return policy.pi_err + 0.5 * policy.value_err - 0.01 * policy.entropy


def entropy_and_losses(policy, train_batch):
    return {"policy_entropy": policy.entropy.item(), "policy_loss": policy.pi_err.item(),
            "vf_loss": policy.value_err.item(), "vf_preds_seen": policy.vf_preds_seen}


def clip_grads(policy, optimizer, loss):
    norm = torch.nn.utils.clip_grad_norm_(policy.model.parameters(), 40.0)
    return {"grad_gnorm": float(norm)}


def sgd_optimizer(policy, config):
    return torch.optim.SGD(policy.model.parameters(), lr=config["lr"])


A3CLikePolicy = build_torch_policy(
    name="A3CLikePolicy", loss_fn=actor_critic_loss, stats_fn=entropy_and_losses,
    postprocess_fn=gae_postprocess, extra_action_out_fn=value_predictions,
    extra_grad_process_fn=clip_grads, optimizer_fn=sgd_optimizer, mixins=[ValueMixin],
    get_default_config=lambda: {"lr": 0.001, **TINY})
# A3C's config (gamma, lambda) and training step (gradients computed on the runners).
A3CLikeTrainer = A3CTrainer.with_updates(name="A3CLikeTrainer", default_policy=A3CLikePolicy)

# --- with_updates on PPO's built-in classes ---


def clipped_only_loss(policy, model, dist_class, train_batch):
    """PPO's clipped surrogate alone, over the columns PPO's batch preparation adds."""
    logits, _ = model.from_batch(train_batch)
    ratio = torch.exp(dist_class(logits).logp(train_batch[SampleBatch.ACTIONS])
                      - train_batch[SampleBatch.ACTION_LOGP])
    adv = train_batch[Postprocessing.ADVANTAGES]
    policy.custom_loss_calls = getattr(policy, "custom_loss_calls", 0) + 1
    return -torch.mean(torch.min(adv * ratio, adv * torch.clamp(ratio, 0.8, 1.2)))


def custom_loss_stats(policy, train_batch):
    return {"custom_loss_calls": float(policy.custom_loss_calls)}


# Assigned to another name than the one it is given, as the page does.
CustomPolicy = PPOTorchPolicy.with_updates(name="MyCustomPPOTorchPolicy",
                                           loss_fn=clipped_only_loss, stats_fn=custom_loss_stats)
CustomTrainer = PPO.with_updates(name="CustomTrainer", default_policy=CustomPolicy)


def plain_plan(workers, config):
    """PPO's step as an execution plan, from rlmesh's blocks."""
    for fragments in parallel_rollouts(workers, config):
        stats = train_one_step(workers, fragments)
        yield {pid: {**s, "from_plan": 1.0} for pid, s in stats.items()}


PlanPPO = PPO.with_updates(name="PlanPPO", execution_plan=plain_plan)


# --- multi-agent: a heuristic policy beside a learned one (the page's rock-paper-scissors idea) ---


class LeanHeuristic(Policy):
    """Pushes the cart toward the side the pole leans to; learns nothing. Its compute_actions
    takes no ``**kwargs`` (so no ``explore``) and gives a string extra output."""

    def compute_actions(self, obs_batch, state_batches, prev_action_batch=None,
                        prev_reward_batch=None, info_batch=None, episodes=None):
        return ([int(obs[2] > 0) for obs in obs_batch], [],
                {"side": ["right" if obs[2] > 0 else "left" for obs in obs_batch]})

    def learn_on_batch(self, samples):
        raise AssertionError("the heuristic is not in policies_to_train")

    def get_weights(self):
        return {}

    def set_weights(self, weights):
        pass

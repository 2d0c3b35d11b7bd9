"""PPOConfig: PPO's own settings (clipped surrogate, GAE, KL penalty) and its defaults for
the shared ones. The names are RLlib's, so tuned RLlib configs carry over; the defaults are
not: RLlib's learn small problems slowly (lr 5e-5, 30 epochs), so rlmesh's were measured
across CartPole, Pendulum, Acrobot and LunarLander (``tests/benchmarks/bench_defaults.py``,
docs/benchmark_log.md "Untuned PPO"). ``PPOConfig.rllib_defaults()`` gives RLlib's values."""

from __future__ import annotations

from dataclasses import dataclass

from rlmesh.algorithms.gae_config import GAESettings
from rlmesh.config.base import AlgorithmConfig, setting
from rlmesh.config.entropy import EntropySchedule
from rlmesh.rl.spec import MODEL_DEFAULTS

# PPO's values for settings AlgorithmConfig declares. Why each differs from RLlib's (in the
# comment: RLlib's value), from the measurements in docs/benchmark_log.md "Untuned PPO":
_PPO_DEFAULTS = {
    # 6e-4 (5e-5): twice SB3's and CleanRL's 3e-4, measured against it on seeds 0-2:
    # CartPole to 475 in 61k steps on every seed (3e-4: 70-86k), LunarLander to 200 in
    # 309k (834k), Acrobot to -100 in 41-43k on two seeds (57k) but 131k on the third
    # (53k). 5e-5 took 68-128k steps and 136-149 s on CartPole, most of it in 30 epochs of
    # tiny steps.
    "lr": 6e-4,
    "rollout_fragment_length": "auto",
    # 2048 (4000): twice the updates per sample; CartPole and Acrobot need fewer env steps,
    # and 2048 steps still hold several episodes of every task measured.
    "train_batch_size": 2048,
    "minibatch_size": 128,
    # 10 (30): 160 gradient steps per 2048 samples, as many per sample as rl-zoo's tuned
    # CartPole; 30 epochs over-fit each batch and cost 3x the time for no fewer env steps.
    "num_epochs": 10,
    "shuffle_batch_per_epoch": True,
    "num_env_runners": 2,
    # Global-norm clipping at 0.5 (none): SB3's and CleanRL's guard against the rare huge
    # advantage batch; it costs nothing measurable.
    "grad_clip": 0.5,
    # [64, 64] trunks (RLlib's [256, 256]): SB3's on-policy default; a gradient step costs
    # a third, and no task measured learned faster with the wider net.
    "model": {**MODEL_DEFAULTS, "fcnet_hiddens": [64, 64]},
    # GAE lambda 0.95 (1.0): the GAE paper's and SB3's value, less variance.
    "lambda_": 0.95,
    # Rewards scaled by the running std of the discounted return on Box actions (RLlib: never),
    # as CleanRL's continuous-action PPO: Pendulum's rewards (down to -16 a step) otherwise
    # swamp the value loss. `rlmesh train --run PPO --env Pendulum-v1` to -250: 67,584 env
    # steps (without: -414 at 1M). Discrete tasks (CartPole's 61,440) are unchanged.
    "normalize_rewards": "auto",
}

@dataclass(kw_only=True)
class PPOConfig(AlgorithmConfig, GAESettings, EntropySchedule, defaults=_PPO_DEFAULTS):
    """Proximal Policy Optimization (Schulman et al. 2017), configured as in RLlib::

        PPOConfig().environment("CartPole-v1").training(lr=3e-4, **{"lambda": 0.95})
    """

    #: The algorithm build() makes from this config.
    algorithm_path = "rlmesh.algorithms.ppo.ppo:PPO"

    use_kl_loss: bool = setting(
        False, "training",
        doc="Add kl_coeff x KL(old policy || new policy) to the loss, kl_coeff adapting "
            "toward kl_target. Default off (RLlib's on): the clip already bounds each "
            "update, and the penalty slowed every task measured.")
    kl_coeff: float = setting(
        0.2, "training", ge=0, doc="Initial coefficient of the KL penalty.")
    kl_target: float = setting(
        0.01, "training", gt=0,
        doc="KL per update that the adaptive kl_coeff aims for: x1.5 when the KL is above "
            "twice the target, x0.5 when below half of it. The KL is the update's own: "
            "the policy after the epochs against the behaviour policy, over the batch "
            "(the PPO paper's rule).")
    vf_loss_coeff: float = setting(
        0.5, "training", ge=0,
        doc="Weight of the value-function loss in the total loss. Default 0.5 (RLlib's 1.0), "
            "SB3's: with grad_clip on the joint gradient, the value loss's large early "
            "gradients otherwise crowd out the policy's.")
    entropy_coeff: float = setting(
        0.0, "training", ge=0, doc="Weight of the entropy bonus subtracted from the loss.")
    clip_param: float = setting(
        0.2, "training", gt=0,
        doc="PPO's epsilon: the probability ratio is clipped to [1 - clip_param, "
            "1 + clip_param]. Default 0.2 (RLlib's 0.3), the PPO paper's value.")
    vf_clip_param: float | None = setting(
        None, "training", gt=0,
        doc="Cap on each sample's squared value error in the value loss, in reward units "
            "squared; None: no cap. Default None (RLlib's 10): a cap of 10 zeroes the value "
            "gradient of every sample whose return is off by more than ~3, which is most of "
            "them on CartPole (returns to 100) or Pendulum (to -1,600).")

    def _cross_checks(self) -> list[str]:
        problems = super()._cross_checks() + self._entropy_schedule_problems()
        # A truncated fragment needs a value estimate to bootstrap the rest of its episode.
        if self.batch_mode == "truncate_episodes" and not self.use_gae:
            problems.append("use_gae: batch_mode 'truncate_episodes' needs GAE (a value "
                            "function to bootstrap cut episodes); set use_gae=True or "
                            "batch_mode='complete_episodes'")
        return problems + self._gae_problems()

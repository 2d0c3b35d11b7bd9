"""PPOConfig: PPO's own settings (clipped surrogate, GAE, KL penalty) and its defaults for
the shared ones, all as in RLlib's PPOConfig so tuned RLlib configs carry over."""

from __future__ import annotations

from dataclasses import dataclass

from rlmesh.config.base import AlgorithmConfig, setting
from rlmesh.rl.spec import MODEL_DEFAULTS

# RLlib's PPOConfig.__init__ values for settings AlgorithmConfig already declares.
_PPO_DEFAULTS = {
    "lr": 5e-5,
    "rollout_fragment_length": "auto",
    "train_batch_size": 4000,
    "minibatch_size": 128,
    "num_epochs": 30,
    "shuffle_batch_per_epoch": True,
    "num_env_runners": 2,
    "model": dict(MODEL_DEFAULTS),
}


@dataclass(kw_only=True)
class PPOConfig(AlgorithmConfig, defaults=_PPO_DEFAULTS):
    """Proximal Policy Optimization (Schulman et al. 2017), configured as in RLlib::

        PPOConfig().environment("CartPole-v1").training(lr=3e-4, **{"lambda": 0.95})
    """

    #: The algorithm build() makes from this config.
    algorithm_path = "rlmesh.algorithms.ppo:PPO"

    use_critic: bool = setting(
        True, "training",
        doc="Learn a value function as the baseline; GAE needs it.")
    use_gae: bool = setting(
        True, "training",
        doc="Advantages by Generalized Advantage Estimation; False: discounted returns "
            "minus the value baseline.")
    lambda_: float = setting(
        1.0, "training", key="lambda", ge=0, le=1,
        doc="GAE lambda: 0 bootstraps from the value function after one step (less "
            "variance, more bias), 1 uses the observed return up to the fragment's end.")
    use_kl_loss: bool = setting(
        True, "training",
        doc="Add kl_coeff x KL(old policy || new policy) to the loss, kl_coeff adapting "
            "toward kl_target.")
    kl_coeff: float = setting(
        0.2, "training", ge=0, doc="Initial coefficient of the KL penalty.")
    kl_target: float = setting(
        0.01, "training", gt=0,
        doc="KL per update that the adaptive kl_coeff aims for: x1.5 when the KL is above "
            "twice the target, x0.5 when below half of it.")
    vf_loss_coeff: float = setting(
        1.0, "training", ge=0, doc="Weight of the value-function loss in the total loss.")
    entropy_coeff: float = setting(
        0.0, "training", ge=0, doc="Weight of the entropy bonus subtracted from the loss.")
    clip_param: float = setting(
        0.3, "training", gt=0,
        doc="PPO's epsilon: the probability ratio is clipped to [1 - clip_param, "
            "1 + clip_param].")
    vf_clip_param: float = setting(
        10.0, "training", gt=0,
        doc="Cap on each sample's squared value error in the value loss; it is in reward "
            "units squared, so raise it when returns are large.")

    def _cross_checks(self) -> list[str]:
        problems = super()._cross_checks()
        # A truncated fragment needs a value estimate to bootstrap the rest of its episode.
        if self.batch_mode == "truncate_episodes" and not self.use_gae:
            problems.append("use_gae: batch_mode 'truncate_episodes' needs GAE (a value "
                            "function to bootstrap cut episodes); set use_gae=True or "
                            "batch_mode='complete_episodes'")
        if self.use_gae and not self.use_critic:
            problems.append("use_critic: GAE needs the value function; set use_critic=True "
                            "or use_gae=False")
        return problems

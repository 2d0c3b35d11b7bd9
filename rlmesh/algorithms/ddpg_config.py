"""DDPGConfig: DDPG's settings (actor and critic networks and learning rates, TD3's twin
critics, target smoothing and delayed actor updates, exploration noise), named and defaulted
as in RLlib's DDPGConfig so tuned RLlib configs carry over (replay, n_step, tau:
``OffPolicyConfig``)."""

from __future__ import annotations

from dataclasses import dataclass

from rlmesh.algorithms.off_policy_config import OffPolicyConfig
from rlmesh.config.base import setting
from rlmesh.rl.action_noise import exploration_problems

# RLlib's DDPGConfig.__init__ values for settings AlgorithmConfig already declares.
_DDPG_DEFAULTS = {
    "train_batch_size": 256,
    "rollout_fragment_length": 1,
    "num_steps_sampled_before_learning_starts": 1500,
    "tau": 0.002,
    "target_network_update_freq": 0,
}


@dataclass(kw_only=True)
class DDPGConfig(OffPolicyConfig, defaults=_DDPG_DEFAULTS):
    """Deep Deterministic Policy Gradient (Lillicrap et al. 2016), configured as in RLlib::

        DDPGConfig().environment("Pendulum-v1").training(actor_lr=1e-3, tau=5e-3)
    """

    #: The algorithm build() makes from this config.
    algorithm_path = "rlmesh.algorithms.ddpg:DDPG"

    actor_hiddens: list = setting(
        [400, 300], "training", doc="Hidden layer sizes of the actor mu(s).")
    actor_hidden_activation: str = setting(
        "relu", "training", doc="Activation of the actor's hidden layers (relu, tanh, swish).")
    critic_hiddens: list = setting(
        [400, 300], "training", doc="Hidden layer sizes of each critic Q(s, a).")
    critic_hidden_activation: str = setting(
        "relu", "training", doc="Activation of the critics' hidden layers.")
    actor_lr: float = setting(1e-3, "training", gt=0, doc="Adam learning rate of the actor.")
    critic_lr: float = setting(1e-3, "training", gt=0, doc="Adam learning rate of the critics.")
    twin_q: bool = setting(
        False, "training",
        doc="Two critics, the target taking the smaller estimate (TD3's clipped double Q).")
    policy_delay: int = setting(
        1, "training", ge=1,
        doc="Update the actor and the targets once every this many critic updates (TD3: 2).")
    smooth_target_policy: bool = setting(
        False, "training",
        doc="Target policy smoothing (TD3): clipped Gaussian noise on the target actor's "
            "action before the target critic scores it.")
    target_noise: float = setting(
        0.2, "training", ge=0,
        doc="Std of the target smoothing noise, in units of half the action range.")
    target_noise_clip: float = setting(
        0.5, "training", ge=0, doc="The target smoothing noise is clipped to +-this.")
    use_huber: bool = setting(
        False, "training", doc="Huber loss on the TD error instead of the squared error.")
    huber_threshold: float = setting(
        1.0, "training", gt=0, doc="Where the Huber loss turns from quadratic to linear.")
    l2_reg: float = setting(
        1e-6, "training", ge=0,
        doc="L2 penalty on the weights (not biases) of the actor in its loss and of the "
            "critics in theirs.")
    exploration_config: dict = setting(
        {"type": "OrnsteinUhlenbeckNoise", "random_timesteps": 1000, "ou_base_scale": 0.1,
         "ou_theta": 0.15, "ou_sigma": 0.2, "initial_scale": 1.0, "final_scale": 0.02,
         "scale_timesteps": 10000},
        "env_runners", merge=True,
        doc="Exploration in the runners: 'type' GaussianNoise (stddev) or "
            "OrnsteinUhlenbeckNoise (ou_theta, ou_sigma, ou_base_scale) added to the actor's "
            "action, scaled from initial_scale to final_scale over scale_timesteps, after "
            "random_timesteps of uniform random actions per runner. explore=False (and "
            "compute_single_action's default) takes the actor's action as it is.")

    def _cross_checks(self) -> list[str]:
        problems = super()._cross_checks() + exploration_problems(self.exploration_config)
        if self.exploration_config.get("type") == "StochasticSampling":
            problems.append("exploration_config: DDPG's actor is deterministic; use type "
                            "GaussianNoise or OrnsteinUhlenbeckNoise")
        if self.lr_schedule is not None:  # it would drive neither optimizer
            problems.append(f"lr_schedule: {type(self).__name__[:-6]} has no single learning "
                            "rate; set actor_lr and critic_lr")
        return problems

"""DQNConfig: DQN's own settings (double Q, dueling heads, noisy nets, distributional Q
(C51), the loss, epsilon-greedy exploration) and its defaults for the shared ones, in
RLlib's names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rlmesh.algorithms.off_policy_config import REPLAY_DEFAULTS, OffPolicyConfig
from rlmesh.config.base import setting
from rlmesh.rl.spec import MODEL_DEFAULTS

#: exploration_config's keys and defaults (RLlib's EpsilonGreedy).
EXPLORATION_DEFAULTS = {"type": "EpsilonGreedy", "initial_epsilon": 1.0, "final_epsilon": 0.02,
                        "epsilon_timesteps": 10_000}
#: exploration_config's types; 'SoftQ' (RLlib's) reads one more key, 'temperature' (1.0).
EXPLORATION_TYPES = ("EpsilonGreedy", "PerWorkerEpsilonGreedy", "SoftQ")

# RLlib's DQNConfig.__init__ values for settings the base configs already declare.
_DQN_DEFAULTS = {
    "lr": 5e-4,
    "train_batch_size": 32,
    "rollout_fragment_length": 4,
    "grad_clip": 40.0,
    "target_network_update_freq": 500,
    "num_steps_sampled_before_learning_starts": 1000,
    "replay_buffer_config": dict(REPLAY_DEFAULTS),
    "model": dict(MODEL_DEFAULTS),
}


@dataclass(kw_only=True)
class DQNConfig(OffPolicyConfig, defaults=_DQN_DEFAULTS):
    """Deep Q-Networks (Mnih et al. 2015) with Rainbow's double Q, dueling heads, n-step
    returns and prioritized replay, configured as in RLlib::

        DQNConfig().environment("CartPole-v1").training(lr=1e-3, double_q=True, n_step=3)
    """

    #: The algorithm build() makes from this config.
    algorithm_path = "rlmesh.algorithms.dqn.dqn:DQN"

    double_q: bool = setting(
        True, "training",
        doc="Double Q-learning (van Hasselt et al. 2016): the online network picks the next "
            "action, the target network values it.")
    dueling: bool = setting(
        True, "training",
        doc="Dueling heads (Wang et al. 2016): Q = V + A - mean(A), from two branches.")
    hiddens: list = setting(
        [256], "training",
        doc="Hidden layers (ReLU) of the advantage and value branches after the model's "
            "fcnet_hiddens trunk; [] puts the Q head straight on the trunk.")
    noisy: bool = setting(
        False, "training",
        doc="Noisy nets (Fortunato et al. 2018): the advantage and value branches and heads "
            "(not the fcnet_hiddens trunk, as RLlib) are NoisyLinear layers with factorised "
            "Gaussian noise, new noise on each learner forward and each runner step; "
            "epsilon-greedy is then off (exploration_config ignored) and greedy acting "
            "(explore=False) uses the mean weights.")
    sigma0: float = setting(
        0.5, "training", gt=0,
        doc="Noisy nets' initial noise scale: sigma starts at sigma0 / sqrt(fan_in).")
    num_atoms: int = setting(
        1, "training", ge=1,
        doc="Atoms of distributional Q-learning (C51, Bellemare et al. 2017): above 1, the Q "
            "head gives each action a categorical distribution of returns over num_atoms "
            "evenly spaced values from v_min to v_max, Q is its mean, and the loss is the "
            "cross-entropy to the projected n-step target distribution (td_error_loss_fn "
            "ignored; prioritized replay's priorities are that cross-entropy). 1: plain Q.")
    v_min: float = setting(
        -10.0, "training",
        doc="Lowest return on the distributional support (num_atoms > 1); targets below "
            "it are clipped to it.")
    v_max: float = setting(
        10.0, "training",
        doc="Highest return on the distributional support (num_atoms > 1); targets above "
            "it are clipped to it.")
    td_error_loss_fn: Literal["huber", "mse"] = setting(
        "huber", "training",
        doc="Loss of the TD error: 'huber' (delta 1, as DQN's clipped error) or 'mse'.")
    exploration_config: dict = setting(
        EXPLORATION_DEFAULTS, "env_runners", merge=True,
        doc="Epsilon-greedy exploration in the runners (RLlib's keys): epsilon goes from "
            "'initial_epsilon' to 'final_epsilon' linearly over 'epsilon_timesteps' env steps "
            "sampled, then stays. Type 'PerWorkerEpsilonGreedy' (APEX): runner i of N keeps "
            "0.4 ** (1 + 7 (i - 1) / (N - 1)) instead. Type 'SoftQ': no epsilon, actions "
            "drawn from softmax(Q / 'temperature') (default 1.0). A dict given updates the "
            "current one key by key.")

    def _cross_checks(self) -> list[str]:
        problems = super()._cross_checks()
        ex = {**EXPLORATION_DEFAULTS, **self.exploration_config}
        if (ex["type"] not in EXPLORATION_TYPES
                or set(ex) - set(EXPLORATION_DEFAULTS) - {"temperature"}):
            problems.append(f"exploration_config: DQN explores with type 'EpsilonGreedy' (or "
                            f"'PerWorkerEpsilonGreedy', APEX's, or 'SoftQ' with 'temperature') "
                            f"and the keys {sorted(EXPLORATION_DEFAULTS)}, got "
                            f"{self.exploration_config}")
        if not ex.get("temperature", 1.0) > 0:
            problems.append(f"exploration_config: SoftQ's temperature must be > 0, got "
                            f"{ex['temperature']}")
        if not all(0 <= ex[k] <= 1 for k in ("initial_epsilon", "final_epsilon")):
            problems.append("exploration_config: epsilons must be in [0, 1]")
        if any(not isinstance(h, int) or h < 1 for h in self.hiddens):
            problems.append(f"hiddens: layer sizes must be positive ints, got {self.hiddens}")
        if self.num_atoms > 1 and not self.v_min < self.v_max:
            problems.append(f"v_min, v_max: the distributional support needs v_min < v_max, "
                            f"got v_min={self.v_min}, v_max={self.v_max}")
        return problems

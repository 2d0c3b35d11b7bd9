"""DQNConfig: DQN's own settings (double Q, dueling heads, noisy nets, distributional Q
(C51), the loss, epsilon-greedy exploration) and its defaults for the shared ones, in
RLlib's names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rlmesh.algorithms.off_policy_config import REPLAY_DEFAULTS, OffPolicyConfig
from rlmesh.config.base import setting
from rlmesh.rl.spec import MODEL_DEFAULTS

#: exploration_config's keys and defaults (RLlib's EpsilonGreedy, but the final epsilon).
EXPLORATION_DEFAULTS = {"type": "EpsilonGreedy", "initial_epsilon": 1.0, "final_epsilon": 0.01,
                        "epsilon_timesteps": 10_000}
#: exploration_config's types; 'SoftQ' (RLlib's) reads one more key, 'temperature' (1.0).
EXPLORATION_TYPES = ("EpsilonGreedy", "PerWorkerEpsilonGreedy", "SoftQ")

# rlmesh's DQN defaults: `rlmesh train --run DQN --env CartPole-v1`, RLlib's first command,
# learns with them alone (450 in 61-74k env steps, seeds 0-2, where stable-baselines3 with
# rl-zoo's tuned CartPole settings stays below 450 in 150k: docs/benchmark_log.md, "DQN's
# defaults (issue 54)"). They are cartpole-dqn.yaml's (rl-zoo's loop, re-tuned in issue 18):
# a gradient step of 64 every 2 env steps (training_intensity 32) on one runner's fragments
# of 256, 3-step returns, prioritized replay annealed to beta 1 over 100k steps, dueling
# heads on a [256, 256] ReLU trunk, lr 1e-3 falling to 1e-4 by 40k steps (fast early, then
# small steps that keep a good policy from being unlearned), epsilon to 0.01. RLlib's
# values (config/rllib_defaults.py's RLLIB_DQN) are what RLlib's files get, and SimpleQ's and
# APEX's defaults. An lr set away from the default replaces the default schedule (lr_at).
DEFAULT_LR = 1e-3
DEFAULT_LR_SCHEDULE = [[0, 1e-3], [40_000, 1e-4]]
_DQN_DEFAULTS = {
    "num_env_runners": 1,
    "lr": DEFAULT_LR,
    "lr_schedule": DEFAULT_LR_SCHEDULE,
    "train_batch_size": 64,
    "rollout_fragment_length": 256,
    "training_intensity": 32,
    "n_step": 3,
    "grad_clip": 10.0,
    "target_network_update_freq": 500,
    "num_steps_sampled_before_learning_starts": 1000,
    "replay_buffer_config": {**REPLAY_DEFAULTS, "capacity": 100_000,
                             "prioritized_replay_beta_annealing_timesteps": 100_000},
    "model": {**MODEL_DEFAULTS, "fcnet_activation": "relu"},
}


def _rllib_dqn(**more) -> dict:
    """RLlib's DQN values for the keys above, as SimpleQ's and APEX's own defaults."""
    from rlmesh.config.rllib_defaults import RLLIB_DQN

    out = {**RLLIB_DQN, "exploration_config": {**EXPLORATION_DEFAULTS,
                                               **RLLIB_DQN["exploration_config"]},
           "replay_buffer_config": {**REPLAY_DEFAULTS, **RLLIB_DQN["replay_buffer_config"]},
           "model": {**MODEL_DEFAULTS, **RLLIB_DQN["model"]}}
    out.update(more)
    return out


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
        [], "training",
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

    def lr_at(self, timestep: int) -> float:
        """As AlgorithmConfig's, but a learning rate set away from DQN's default wins over
        the default schedule: ``.training(lr=2.3e-3)`` trains at 2.3e-3, where RLlib's rule
        (a schedule replaces lr) would keep the default decay the user never asked for."""
        if self.lr_schedule == DEFAULT_LR_SCHEDULE and self.lr != DEFAULT_LR:
            return self.lr
        return super().lr_at(timestep)

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

"""OffPolicyConfig: the settings every replay-based algorithm shares (DQN, SAC, TD3, DDPG):
the replay buffer, n-step returns, how much to train per sampled step, when learning starts,
target networks, in RLlib's names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlmesh.config.base import AlgorithmConfig, setting
from rlmesh.config.schedules import value_at

#: replay_buffer_config's keys and defaults (RLlib's); a dict given updates these key by key.
REPLAY_DEFAULTS: dict[str, Any] = {
    "type": "MultiAgentPrioritizedReplayBuffer",
    "capacity": 50_000,
    "prioritized_replay_alpha": 0.6,
    "prioritized_replay_beta": 0.4,
    "final_prioritized_replay_beta": 1.0,
    "prioritized_replay_beta_annealing_timesteps": 0,
    "prioritized_replay_eps": 1e-6,
}
PRIORITIZED_TYPES = ("MultiAgentPrioritizedReplayBuffer", "PrioritizedReplayBuffer",
                     "PrioritizedEpisodeReplayBuffer")
UNIFORM_TYPES = ("MultiAgentReplayBuffer", "ReplayBuffer", "EpisodeReplayBuffer")


@dataclass(kw_only=True)
class OffPolicyConfig(AlgorithmConfig, defaults={"rollout_fragment_length": 4,
                                                 "train_batch_size": 32}):
    """Settings of replay-based algorithms; DQNConfig, SACConfig, ... add their losses'."""

    replay_buffer_config: dict = setting(
        REPLAY_DEFAULTS, "training", merge=True,
        doc="The replay buffer, in RLlib's keys: 'type' (MultiAgentPrioritizedReplayBuffer "
            "or MultiAgentReplayBuffer: uniform), 'capacity' (transitions; the buffer's "
            "arrays are this big when full, reported as replay_buffer_size_bytes, and a "
            "capacity beyond the machine's available memory is refused at build), "
            "'prioritized_replay_alpha' (0: uniform), 'prioritized_replay_beta' (importance "
            "weight exponent, annealed linearly to 'final_prioritized_replay_beta' over "
            "'prioritized_replay_beta_annealing_timesteps' env steps; 0: no annealing), "
            "'prioritized_replay_eps' (added to |TD error|).")
    n_step: int = setting(
        1, "training", ge=1,
        doc="Steps of reward summed in each stored transition (n-step return), computed once "
            "when fragments arrive; the target bootstraps gamma**n later (sooner at an "
            "episode's end).")
    training_intensity: float | None = setting(
        None, "training", gt=0,
        doc="Samples trained on per env step sampled (RLlib's name): the learner makes "
            "training_intensity / train_batch_size gradient steps per sampled step. None: "
            "one gradient step of train_batch_size per sampling round.")
    num_steps_sampled_before_learning_starts: int = setting(
        1000, "training", ge=0, aliases=("learning_starts",),
        doc="Env steps sampled (and stored) before the first gradient step.")
    target_network_update_freq: int = setting(
        500, "training", ge=0,
        doc="Env steps sampled between target network updates; 0: after every gradient step "
            "(with tau < 1, SAC's soft update).")
    tau: float = setting(
        1.0, "training", gt=0, le=1,
        doc="Target update: target <- tau * online + (1 - tau) * target; 1.0 copies.")
    store_buffer_in_checkpoints: bool = setting(
        False, "training",
        doc="Write the replay buffer's contents into checkpoints (replay.npz), restored with "
            "them; off by default since a full buffer can take gigabytes.")
    min_sample_timesteps_per_iteration: int = setting(
        1000, "reporting", ge=0, aliases=("min_sample_timesteps_per_reporting",),
        doc="An iteration (one train() call) samples at least this many env steps.")

    def replay_settings(self) -> dict[str, Any]:
        """replay_buffer_config over the defaults."""
        return {**REPLAY_DEFAULTS, **self.replay_buffer_config}

    def replay_beta(self, timestep: int) -> float:
        """prioritized_replay_beta, annealed linearly over the env steps sampled."""
        rb = self.replay_settings()
        steps = rb["prioritized_replay_beta_annealing_timesteps"]
        if not steps:
            return float(rb["prioritized_replay_beta"])
        return float(value_at([[0, rb["prioritized_replay_beta"]],
                               [steps, rb["final_prioritized_replay_beta"]]], timestep))

    @property
    def prioritized_replay(self) -> bool:
        return (self.replay_settings()["type"] in PRIORITIZED_TYPES
                and self.replay_settings()["prioritized_replay_alpha"] > 0)

    def _cross_checks(self) -> list[str]:
        problems = super()._cross_checks()
        rb = self.replay_settings()
        unknown = sorted(set(rb) - set(REPLAY_DEFAULTS) - {"replay_sequence_length",
                                                           "worker_side_prioritization"})
        if unknown:
            problems.append(f"replay_buffer_config: unknown keys {unknown}; it takes "
                            f"{sorted(REPLAY_DEFAULTS)}")
        if rb["type"] not in PRIORITIZED_TYPES + UNIFORM_TYPES:
            problems.append(f"replay_buffer_config: type {rb['type']!r} is not one of "
                            f"{', '.join(PRIORITIZED_TYPES + UNIFORM_TYPES)}")
        if not isinstance(rb["capacity"], int) or rb["capacity"] < 1:
            problems.append(f"replay_buffer_config: capacity must be a positive int, got "
                            f"{rb['capacity']!r}")
        if self.rollout_fragment_length == "auto":
            problems.append("rollout_fragment_length: off-policy algorithms sample fragments "
                            "of a set length (env steps per env between updates), got 'auto'")
        if self.policy_server_address is not None:
            problems.append("policy_server_address: external simulators feed on-policy "
                            "algorithms (PPO) only so far")
        return problems

"""APEX's settings (Horgan et al. 2018, RLlib's ApexDQNConfig and ApexDDPGConfig): sharded
replay, per-runner exploration, weight broadcasts; mixed into DQN's and DDPG's configs."""

from __future__ import annotations

from dataclasses import dataclass

from rlmesh.algorithms.ddpg_config import DDPGConfig
from rlmesh.algorithms.dqn_config import EXPLORATION_DEFAULTS, DQNConfig, _rllib_dqn
from rlmesh.config.base import setting
from rlmesh.config.streaming import StreamingSettings


@dataclass(kw_only=True)
class ApexSettings(StreamingSettings):
    """What the APEX plumbing reads beyond the off-policy settings; declared once here
    (broadcast_interval and the runners' in-flight fragments: config/streaming.py)."""

    num_replay_buffer_shards: int = setting(
        2, "training", ge=1, aliases=("num_replay_shards",),
        doc="Replay shard processes; each holds capacity / num_replay_buffer_shards "
            "transitions, takes the fragments of runners i mod shards and serves the "
            "learner's samples once it holds its share of "
            "num_steps_sampled_before_learning_starts (a capacity too small for that is "
            "refused at build). A shard that dies is restarted empty. 1: no process, the "
            "buffer lives in the driver's process (where a learner with num_learners=0 "
            "samples it without a socket).")
    replay_sample_requests_in_flight: int = setting(
        2, "training", ge=1,
        doc="Sample requests the learner keeps outstanding per shard (its credits); the "
            "batches that come back wait in a queue of that many per shard.")

    def _apex_problems(self) -> list[str]:
        problems = []
        if self.store_buffer_in_checkpoints and self.num_replay_buffer_shards > 1:
            problems.append("store_buffer_in_checkpoints: APEX's buffers live in its replay "
                            "shard processes and are not checkpointed; set it False, or "
                            "num_replay_buffer_shards=1 (the buffer in the driver)")
        if self.num_env_runners < 1:
            problems.append("num_env_runners: APEX samples in runner processes streaming to "
                            "its replay shards; set at least 1")
        if self.num_replay_buffer_shards > max(1, self.num_env_runners):
            most = max(1, self.num_env_runners)
            problems.append(f"num_replay_buffer_shards: runner i feeds shard i mod shards, so "
                            f"{self.num_replay_buffer_shards} shards for {self.num_env_runners} "
                            f"runners leaves some empty; use at most {most}")
        problems += self._warm_up_problems()
        if self.num_learners > 1:
            problems.append("num_learners: APEX trains one learner (in the driver with 0, "
                            "in a process of its own with 1); data-parallel APEX learners "
                            "are not supported, set num_learners to 0 or 1")
        return problems

    def _warm_up_problems(self) -> list[str]:
        """A shard serves once it holds its share of the learning starts, which its share of
        the capacity must hold: else it never serves and the learner never trains."""
        from rlmesh.roles.replay_shard import shard_capacity, shard_learning_starts

        capacity, shards = self.replay_settings()["capacity"], self.num_replay_buffer_shards
        starts = self.num_steps_sampled_before_learning_starts
        if not isinstance(capacity, int) or capacity < 1:
            return []  # OffPolicyConfig says what is wrong with it
        held, wanted = shard_capacity(capacity, shards), shard_learning_starts(starts, shards)
        if held >= wanted:
            return []
        return [f"replay_buffer_config: capacity {capacity:,} over {shards} replay shard(s) "
                f"holds {held:,} transitions per shard, fewer than the {wanted:,} each waits "
                f"for before learning starts (num_steps_sampled_before_learning_starts="
                f"{starts:,}): the learner would never train; raise capacity to at least "
                f"{wanted * shards:,} or lower num_steps_sampled_before_learning_starts to "
                f"at most {held * shards:,}"]


# RLlib's ApexDQNConfig values for settings DQN declares (its CartPole example's scale:
# RLlib's 2M-transition buffer and 50k warm-up steps are for Atari); DQN's other settings
# take RLlib's values, not rlmesh's tuned DQN defaults.
_APEX_DQN_DEFAULTS = {
    **_rllib_dqn(),
    "num_env_runners": 2,  # RLlib's 32, for a cluster
    "n_step": 3,
    "train_batch_size": 512,
    "rollout_fragment_length": 50,
    "target_network_update_freq": 50_000,
    "num_steps_sampled_before_learning_starts": 50_000,
    "min_sample_timesteps_per_iteration": 25_000,
    "exploration_config": {**EXPLORATION_DEFAULTS, "final_epsilon": 0.02,
                           "type": "PerWorkerEpsilonGreedy"},
    "replay_buffer_config": {"type": "MultiAgentPrioritizedReplayBuffer", "capacity": 2_000_000,
                             "prioritized_replay_alpha": 0.6, "prioritized_replay_beta": 0.4,
                             "prioritized_replay_eps": 1e-6, "worker_side_prioritization": True},
}


@dataclass(kw_only=True)
class ApexDQNConfig(DQNConfig, ApexSettings, defaults=_APEX_DQN_DEFAULTS):
    """Distributed prioritized experience replay with DQN (APEX), as RLlib's::

        ApexDQNConfig().environment("CartPole-v1").env_runners(num_env_runners=3)
            .training(num_replay_buffer_shards=2)
    """

    algorithm_path = "rlmesh.algorithms.apex:ApexDQN"

    def _cross_checks(self) -> list[str]:
        return super()._cross_checks() + self._apex_problems()


_APEX_DDPG_DEFAULTS = {
    "num_env_runners": 2,
    "n_step": 3,
    "train_batch_size": 512,
    "rollout_fragment_length": 50,
    "target_network_update_freq": 500_000,
    "tau": 1.0,
    "num_steps_sampled_before_learning_starts": 50_000,
    "min_sample_timesteps_per_iteration": 25_000,
    "replay_buffer_config": {"type": "MultiAgentPrioritizedReplayBuffer",
                             "capacity": 2_000_000},
}


@dataclass(kw_only=True)
class ApexDDPGConfig(DDPGConfig, ApexSettings, defaults=_APEX_DDPG_DEFAULTS):
    """APEX with DDPG's actor and critics (RLlib's ApexDDPGConfig)::

        ApexDDPGConfig().environment("Pendulum-v1").env_runners(num_env_runners=2)
    """

    algorithm_path = "rlmesh.algorithms.apex:ApexDDPG"

    def _cross_checks(self) -> list[str]:
        return super()._cross_checks() + self._apex_problems()

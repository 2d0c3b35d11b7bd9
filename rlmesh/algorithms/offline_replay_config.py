"""OfflineReplayConfig: what replay-based learning from a dataset alone adds to the
off-policy settings (CQL, IQL): how much an iteration trains, and ``input`` being a dataset."""

from __future__ import annotations

from dataclasses import dataclass

from rlmesh.algorithms.off_policy_config import OffPolicyConfig
from rlmesh.config.base import setting

# Nothing is sampled for training (the data is the replay), nor is there a warm-up.
_OFFLINE_DEFAULTS = {"num_env_runners": 0, "num_steps_sampled_before_learning_starts": 0}


@dataclass(kw_only=True)
class OfflineReplayConfig(OffPolicyConfig, defaults=_OFFLINE_DEFAULTS):
    """Settings of replay-based algorithms that learn from ``input`` alone; the whole
    dataset is their replay buffer (replay_buffer_config's capacity is not used)."""

    min_train_timesteps_per_iteration: int = setting(
        25_600, "reporting", ge=0, aliases=("min_train_timesteps_per_reporting",),
        doc="Rows of the dataset an iteration trains on: ceil(this / train_batch_size) "
            "gradient steps on train_batch_size transitions drawn from the dataset, at least "
            "one. RLlib's name; its CQL default, 100, makes each iteration one gradient step "
            "(and one evaluation per step with evaluation_interval 1): here 25,600, 100 "
            "steps of 256.")

    def gradient_steps_per_iteration(self) -> int:
        return max(1, -(-self.min_train_timesteps_per_iteration // self.train_batch_size))

    def _cross_checks(self) -> list[str]:
        problems = super()._cross_checks()
        if self.input_ == "sampler" or isinstance(self.input_, dict):
            name = type(self).__name__.removesuffix("Config")
            problems.append(f"input: {name} learns from a dataset alone: a folder, a file, a "
                            "glob or a list of them (mixes with the sampler or with shares are "
                            f"MARWIL's and BC's); got {self.input_!r}")
        return problems

"""``RunView``: what the driver's helpers (checkpoints, results, evaluation, the runner group,
policies added while training) read of a running ``Algorithm``. A typing Protocol, so they
are typed by it without importing driver/algorithm.py, which imports them."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np

    from rlmesh.config.base import AlgorithmConfig
    from rlmesh.driver.learner_group import LearnerGroup
    from rlmesh.driver.mesh import Mesh
    from rlmesh.policy.policy import Policy
    from rlmesh.rl.filters import NoFilter


class RunView(Protocol):
    """The public state of a run (``Algorithm`` has all of it)."""

    config: AlgorithmConfig
    mesh: Mesh
    learner_group: LearnerGroup
    policy_specs: dict[str, dict[str, Any]]
    iteration: int
    timesteps_total: int
    episodes_total: int
    num_env_steps_trained: int
    num_agent_steps_sampled: int
    num_nonfinite_steps_skipped: int
    nonfinite_counts: dict[str, int]
    time_total_s: float
    episode_window: deque[dict[str, Any]]
    entropy_warned: set[str]
    obs_filter: NoFilter  # NoFilter or MeanStdFilter
    callbacks: Any  # the user's callbacks object, or None
    logdir: str | None
    last_checkpoint: str | None  # the newest save()'s folder (what a failure names)
    run_name: str

    def get_weights(self, policies: list[str] | None = None) -> dict[str, dict[str, np.ndarray]]: ...

    def get_default_policy_class(self, config: AlgorithmConfig) -> type[Policy] | str: ...

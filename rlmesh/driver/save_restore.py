"""``SaveRestore``: ``Algorithm.save`` and ``restore``, the glue between a run and a checkpoint
folder: the learners' state, the run's counters and the global observation filter out and back
in (the folder's format and checks: checkpoints.py)."""

from __future__ import annotations

import time
from pathlib import Path

from rlmesh.driver import checkpoints
from rlmesh.driver.learner_failure import learner_calls
from rlmesh.rl.columns import DEFAULT_POLICY_ID
from rlmesh.runtime import RemoteError


class SaveRestore:
    """The checkpoint calls of ``Algorithm``, on the run's attributes it sets (``RunView``'s,
    and ``env_runners``)."""

    def save(self, checkpoint_dir: str | Path | None = None) -> str:
        """Write a checkpoint (atomically) and return its directory."""
        if checkpoint_dir is None:  # a folder per run: clean what killed runs left in theirs
            root = Path.home() / "rlmesh_results" / "checkpoints"
            checkpoints.remove_stale_under(root, depth=1)
            checkpoint_dir = root / (f"{type(self).__name__}_{time.strftime('%Y-%m-%d_%H-%M-%S')}"
                                     f"/checkpoint_{self.iteration:06d}")
        with learner_calls(self):
            state = self.learner_group.get_state()
        self.last_checkpoint = checkpoints.write(Path(checkpoint_dir), self, state)
        return self.last_checkpoint

    def restore(self, path: str | Path, trust_code: bool = False) -> None:
        """Load a checkpoint's learner state and counters. Code it names outside rlmesh and
        this run's own config needs ``trust_code`` (see ``checkpoints.check_code``)."""
        meta, state = checkpoints.read(Path(path), trust_code, trusted=checkpoints.code_of(self))
        try:
            self.learner_group.set_state(state)
        except (RemoteError, RuntimeError, KeyError, ValueError, TypeError) as exc:
            # Another model or algorithm (layer sizes, a different env's spaces): torch's
            # "Error(s) in loading state_dict for X:" says little without its next line.
            text = exc.remote_msg if isinstance(exc, RemoteError) else str(
                exc.args[0] if exc.args else exc)
            lines = [line.strip() for line in str(text).splitlines() if line.strip()]
            raise checkpoints.CheckpointError(
                f"{path} does not fit this {type(self).__name__} run "
                f"({meta.get('algorithm')} checkpoint): {' '.join(lines[:2])[:300]}") from None
        self.env_runners.drop_sample_ahead()
        counters = meta["counters"]
        self.iteration = counters["training_iteration"]
        self.timesteps_total = counters["timesteps_total"]
        self.episodes_total = counters["episodes_total"]
        self.num_env_steps_trained = counters.get("num_env_steps_trained", 0)
        self.time_total_s = counters["time_total_s"]
        self.obs_filter.set_state(meta.get("filters", {}).get(DEFAULT_POLICY_ID))
        self.obs_filter.flush()  # the restored statistics are global already
        if self.config.observation_filter != "NoFilter":
            self.mesh.runners.foreach("set_filter_state", self.obs_filter.get_state())
        if meta.get("connector_filters") and self.config.env_to_module_connector is not None:
            self.connector_filters.set_state(meta["connector_filters"])
            self.mesh.runners.foreach("set_connector_filter_state",
                                      self.connector_filters.get_state())
        self.learner_group.publish()
        if self.callbacks is not None:
            self.callbacks.on_checkpoint_loaded(algorithm=self)

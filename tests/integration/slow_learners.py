"""A learner for the stuck-learner test, importable by path so learner processes build it."""

from __future__ import annotations

import os
import time

from rlmesh.core.learner import Learner


class SleepyLearner(Learner):
    """PPO's learner whose loss sleeps ``RLMESH_TEST_SLEEP_S`` seconds (default 30) once, at
    its 4th update: a loss stuck in a lock, a slow file system, a debugger left attached."""

    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        self.losses = getattr(self, "losses", 0) + 1
        if self.losses == 4:
            time.sleep(float(os.environ.get("RLMESH_TEST_SLEEP_S", "30")))
        return super().compute_loss_for_module(module_id=module_id, config=config,
                                               batch=batch, fwd_out=fwd_out)

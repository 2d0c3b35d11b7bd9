"""APPO with ``vtrace=False`` (RLlib's cartpole-appo.yaml) end to end: PPO's surrogate on
GAE targets over each fragment learns CartPole through the asynchronous pipeline."""

from __future__ import annotations

import numpy as np

from rlmesh.algorithms.appo_config import APPOConfig
from tests.integration.test_impala import cartpole, train_until


def test_appo_without_vtrace_learns_cartpole_quickly():
    config = cartpole(APPOConfig, runners=1, vtrace=False, num_sgd_iter=2,
                      **{"lambda": 0.95}).reporting(min_time_s_per_reporting=0.25)
    with config.build() as algo:
        best, result = train_until(algo, 50, 200)
        assert best >= 50, f"APPO (vtrace=False) did not learn CartPole: best {best}"
        stats = result["info"]["learner"]["default_policy"]
        assert np.isfinite(stats["policy_loss"]) and np.isfinite(stats["vf_loss"])
        assert "num_target_updates" not in stats  # no target network without V-trace

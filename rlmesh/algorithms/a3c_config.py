"""A3CConfig: A2C's settings with RLlib's A3C defaults, plus how long an asynchronous
iteration lasts, and the topology A3C supports (its learner in the driver)."""

from __future__ import annotations

from dataclasses import dataclass

from rlmesh.algorithms.a2c_config import A2CConfig
from rlmesh.config.base import setting

# RLlib's A3CConfig.__init__ values where they differ from A2C's; train_batch_size is
# rlmesh's (RLlib's iterations end by time alone).
_A3C_DEFAULTS = {
    "min_time_s_per_iteration": 5.0,
    "rollout_fragment_length": 10,
    "train_batch_size": 500,
}


@dataclass(kw_only=True)
class A3CConfig(A2CConfig, defaults=_A3C_DEFAULTS):
    """Asynchronous advantage actor-critic (Mnih et al. 2016), configured as in RLlib::

        A3CConfig().environment("CartPole-v1").training(gamma=0.95)
    """

    #: The algorithm build() makes from this config.
    algorithm_path = "rlmesh.algorithms.a3c:A3C"


    def _cross_checks(self) -> list[str]:
        problems = super()._cross_checks()
        if self.num_learners != 0:
            problems.append(f"num_learners: A3C applies the runners' gradients in the driver "
                            f"process; set num_learners=0, got {self.num_learners}")
        if self.microbatch_size is not None:
            problems.append("microbatch_size: A3C's runners compute the gradient of each "
                            "fragment in one pass; leave microbatch_size at None")
        if self.policy_server_address is not None:
            problems.append("policy_server_address: A3C computes gradients where it samples, "
                            "so it needs env runners with envs of their own")
        return problems

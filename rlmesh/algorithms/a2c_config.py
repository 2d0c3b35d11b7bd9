"""A2CConfig: the advantage actor-critic's settings (GAE, loss weights, microbatches, the
optimizer group) and RLlib's A2C defaults for the shared ones; A3CConfig builds on it."""

from __future__ import annotations

from dataclasses import dataclass

from rlmesh.algorithms.gae_config import GAESettings
from rlmesh.config.base import AlgorithmConfig, setting
from rlmesh.config.entropy import EntropySchedule
from rlmesh.config.optimizer import OptimizerSettings
from rlmesh.rl.spec import MODEL_DEFAULTS

# RLlib's A2CConfig.__init__ values (its A3C defaults, with A2C's fragment length).
_A2C_DEFAULTS = {
    "lr": 0.0001,
    "grad_clip": 40.0,
    "rollout_fragment_length": "auto",
    "num_env_runners": 2,
    "model": dict(MODEL_DEFAULTS),
}


@dataclass(kw_only=True)
class A2CConfig(AlgorithmConfig, GAESettings, OptimizerSettings, EntropySchedule,
                defaults=_A2C_DEFAULTS):
    """Advantage actor-critic (Mnih et al. 2016, synchronous), configured as in RLlib::

        A2CConfig().environment("CartPole-v1").training(lr=0.001, microbatch_size=40)
    """

    #: The algorithm build() makes from this config.
    algorithm_path = "rlmesh.algorithms.a2c:A2C"

    vf_loss_coeff: float = setting(
        0.5, "training", ge=0,
        doc="Weight of the value loss (mean squared error to the GAE value targets) in "
            "the total loss.")
    entropy_coeff: float = setting(
        0.01, "training", ge=0, doc="Weight of the entropy bonus subtracted from the loss.")
    microbatch_size: int | None = setting(
        None, "training", gt=0,
        doc="Accumulate the gradient of each train batch over microbatches of this many "
            "samples and step once per batch: the same update with less memory for the "
            "activations. None: the whole batch in one pass.")

    def _cross_checks(self) -> list[str]:
        problems = super()._cross_checks() + self._entropy_schedule_problems()
        if not self.use_critic:  # RLlib's A2C/A3C have the key; rlmesh's always learn one
            problems.append("use_critic: A2C and A3C always learn the critic they bootstrap "
                            "from; leave use_critic=True")
        if self.microbatch_size is not None and self.minibatch_size is not None:
            problems.append("microbatch_size: A2C steps once per train batch; with "
                            "microbatch_size set, leave minibatch_size at None")
        return problems

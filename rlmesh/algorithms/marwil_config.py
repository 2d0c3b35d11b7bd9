"""MARWILConfig: monotonic advantage re-weighted imitation learning's settings (beta, the
value loss weight, the moving average of squared advantages) and RLlib's MARWIL defaults."""

from __future__ import annotations

from dataclasses import dataclass

from rlmesh.config.base import AlgorithmConfig, setting
from rlmesh.rl.spec import MODEL_DEFAULTS

# RLlib's MARWILConfig.__init__ values; batch_mode complete_episodes so that sampled data,
# like offline episodes, gives whole-episode returns.
_MARWIL_DEFAULTS = {
    "lr": 0.0001,
    "train_batch_size": 2000,
    "num_env_runners": 0,
    "batch_mode": "complete_episodes",
    "model": dict(MODEL_DEFAULTS),
}


@dataclass(kw_only=True)
class MARWILConfig(AlgorithmConfig, defaults=_MARWIL_DEFAULTS):
    """MARWIL (Wang et al. 2018), configured as in RLlib::

        MARWILConfig().environment("CartPole-v1").offline_data(input="/data/cartpole")
            .training(beta=1.0, lr=1e-3)
    """

    #: The algorithm build() makes from this config.
    algorithm_path = "rlmesh.algorithms.marwil:MARWIL"
    #: With num_env_runners > 0 each runner reads its shard of ``input``'s files
    #: (rlmesh/offline/sharded.py); with 0 the driver reads them all.
    reads_input_on_runners = True

    beta: float = setting(
        1.0, "training", ge=0,
        doc="How much the advantage weighs each logged action: the imitation loss is "
            "-exp(beta * A / c) * log pi(a|s), c the root of the moving average of squared "
            "advantages. 0 imitates every action alike (behaviour cloning, BC) and trains "
            "no value function.")
    vf_coeff: float = setting(
        1.0, "training", ge=0,
        doc="Weight of the value loss 0.5 * (return - V(s))^2 in the total loss "
            "(beta > 0 only).")
    moving_average_sqd_adv_norm_start: float = setting(
        100.0, "training", gt=0,
        doc="Start of the moving average of squared advantages (c^2 above).")
    moving_average_sqd_adv_norm_update_rate: float = setting(
        1e-8, "training", ge=0, le=1,
        doc="Step of that moving average towards each minibatch's mean squared advantage "
            "(RLlib's 1e-8 keeps it near its start).")

    def _cross_checks(self) -> list[str]:
        problems = super()._cross_checks()
        if self.input_ == "sampler" and self.batch_mode != "complete_episodes":
            problems.append("batch_mode: MARWIL weighs actions by the discounted return of the "
                            "rest of their episode, so sampled data needs 'complete_episodes'; "
                            f"got {self.batch_mode!r}")
        return problems

"""BCConfig: behaviour cloning, MARWIL with beta = 0 (every logged action imitated alike,
no value function), as RLlib's BCConfig."""

from __future__ import annotations

from dataclasses import dataclass

from rlmesh.algorithms.marwil_config import MARWILConfig


@dataclass(kw_only=True)
class BCConfig(MARWILConfig, defaults={"beta": 0.0}):
    """Behaviour cloning, configured as in RLlib::

        BCConfig().environment("CartPole-v1").offline_data(input="/data/cartpole")
    """

    #: The algorithm build() makes from this config.
    algorithm_path = "rlmesh.algorithms.bc:BC"

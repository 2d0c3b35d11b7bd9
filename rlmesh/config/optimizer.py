"""The optimizer group: which optimizer a learner builds (``opt_type``) and RMSProp's
settings, in RLlib's names. Mixed into the configs of IMPALA (so APPO) and A2C (so A3C);
each setting is declared here once (``rl/optim.py``'s ``from_config`` reads them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rlmesh.config.settings import setting


@dataclass(kw_only=True)
class OptimizerSettings:
    opt_type: Literal["adam", "rmsprop"] = setting(
        "adam", "training", doc="The optimizer: 'adam' or 'rmsprop' (decay, momentum, epsilon).")
    decay: float = setting(
        0.99, "training", ge=0, le=1, doc="RMSProp's decay of the squared-gradient average.")
    momentum: float = setting(
        0.0, "training", ge=0, doc="RMSProp's momentum (0: none, the update is the scaled gradient).")
    epsilon: float = setting(
        0.1, "training", gt=0,
        doc="RMSProp's epsilon, added to the root of the squared-gradient average: the "
            "floor of the denominator, so it bounds a step at lr x gradient / epsilon.")

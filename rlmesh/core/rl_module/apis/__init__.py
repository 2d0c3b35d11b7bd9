"""RLlib's ``ray.rllib.core.rl_module.apis`` (rlmesh/models/rl_module_apis.py)."""

from rlmesh.models.rl_module_apis import (InferenceOnlyAPI, QNetAPI, TargetNetworkAPI,
                                          ValueFunctionAPI)

__all__ = ["InferenceOnlyAPI", "QNetAPI", "TargetNetworkAPI", "ValueFunctionAPI"]

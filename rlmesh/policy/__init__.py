"""The policy contract: what acts in the env runners and what learns in the learners, one
object per policy id (``Policy``), its torch implementation (``TorchPolicy``) and the
``build_policy`` template. Names load on first use: ``Policy`` needs no torch."""

import importlib

_EXPORTS = {"Policy": "policy", "PolicyError": "policy", "PolicySpec": "policy_spec",
            "TorchPolicy": "torch_policy", "build_policy": "policy_template",
            "export_model": "export", "SampleBatch": None}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'rlmesh.policy' has no attribute {name!r}")
    module = _EXPORTS[name]
    value = (getattr(importlib.import_module(f"rlmesh.policy.{module}"), name) if module
             else getattr(importlib.import_module("rlmesh.rl.columns"), name))
    globals()[name] = value
    return value

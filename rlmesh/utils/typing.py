"""RLlib's ``ray.rllib.utils.typing`` names that Trainer-era code annotates with: plain
aliases here (rlmesh's configs are dicts or AlgorithmConfig objects)."""

from typing import Any, Dict

TrainerConfigDict = PartialTrainerConfigDict = AlgorithmConfigDict = Dict[str, Any]
EnvConfigDict = ModelConfigDict = ResultDict = Dict[str, Any]
PolicyID = AgentID = EnvID = str
TensorType = Any

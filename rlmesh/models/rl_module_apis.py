"""RLlib's ``ray.rllib.core.rl_module.apis``: what an algorithm asks of a module beyond
its forward passes. rlmesh reads them by duck typing: a module with ``compute_values`` gives
PPO, APPO and IMPALA their values whether or not it names ``ValueFunctionAPI``."""

from __future__ import annotations

import abc
from typing import Any


class ValueFunctionAPI(abc.ABC):
    """The state values the actor-critic losses train (PPO, APPO, IMPALA)."""

    @abc.abstractmethod
    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> Any:
        """Values ``[B]`` (``[B, T]`` for a stateful module) of ``batch[Columns.OBS]``;
        ``embeddings``: the encoder's output of the same forward pass, when it has one."""


class InferenceOnlyAPI(abc.ABC):
    """A module whose runners' copy leaves out what only the learner needs."""

    @abc.abstractmethod
    def get_non_inference_attributes(self) -> list[str]:
        """The attributes (e.g. ``"vf"``) runners do not build."""


class TargetNetworkAPI(abc.ABC):
    """A module with target networks (DQN, SAC)."""

    @abc.abstractmethod
    def make_target_networks(self) -> None: ...

    @abc.abstractmethod
    def get_target_network_pairs(self) -> list[tuple[Any, Any]]: ...

    @abc.abstractmethod
    def forward_target(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]: ...


class QNetAPI(abc.ABC):
    """Q-values of every action (DQN)."""

    @abc.abstractmethod
    def compute_q_values(self, batch: dict[str, Any]) -> dict[str, Any]: ...


__all__ = ["InferenceOnlyAPI", "QNetAPI", "TargetNetworkAPI", "ValueFunctionAPI"]

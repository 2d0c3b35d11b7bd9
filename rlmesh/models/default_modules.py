"""The algorithms' default networks as RLModules a user can subclass: PPO's (which IMPALA
shares, as in RLlib) and APPO's, both rlmesh's default actor-critic model
(``rl/default_model.py: ActorCriticMLP``, built from ``model_config``'s rlmesh keys).

Given as ``RLModuleSpec(module_class=DefaultPPOTorchRLModule)`` (or no class) the policy
builds the same default model it builds without a spec, numpy runners included; a subclass
runs through the module's forward passes (``policy/module_model.py``). Override
``build_network`` to change the network and keep the passes, or ``setup`` and ``_forward*``
to write your own.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from rlmesh.models.rl_module_apis import ValueFunctionAPI
from rlmesh.models.torch_rl_module import TorchRLModule
from rlmesh.rl.columns import Columns
from rlmesh.rl.spec import MODEL_DEFAULTS


def rlmesh_model_keys(model_config: dict[str, Any]) -> dict[str, Any]:
    """The keys of ``model_config`` that rlmesh's default model reads (RLlib's
    DefaultModelConfig has more, for its catalogs)."""
    return {k: v for k, v in model_config.items() if k in MODEL_DEFAULTS}


class DefaultActorCriticTorchRLModule(TorchRLModule, ValueFunctionAPI):
    """Policy logits and state values from one network (``self.net``)."""

    def setup(self) -> None:
        self.net = self.build_network()

    def build_network(self) -> nn.Module:
        """rlmesh's default actor-critic model on this module's spaces and model_config."""
        from rlmesh.rl.default_model import build_model

        config = rlmesh_model_keys(self.model_config)
        if config.get("use_lstm") or config.get("custom_model"):
            raise ValueError(f"{type(self).__name__}: use_lstm and custom_model belong to the "
                             "model without an RLModule; write a stateful TorchRLModule "
                             "(get_initial_state, Columns.STATE_IN/STATE_OUT) instead")
        return build_model(self.observation_space, self.action_space, config)

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        obs = batch[Columns.OBS]
        if hasattr(self.net, "policy_inputs"):
            return {Columns.ACTION_DIST_INPUTS: self.net.policy_inputs(obs)}
        return {Columns.ACTION_DIST_INPUTS: self.net(obs)[0]}

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        dist_inputs, values = self.net(batch[Columns.OBS])
        return {Columns.ACTION_DIST_INPUTS: dist_inputs, Columns.VF_PREDS: values}

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> Any:
        if hasattr(self.net, "values"):
            return self.net.values(batch[Columns.OBS])
        return self.net(batch[Columns.OBS])[1]


class DefaultPPOTorchRLModule(DefaultActorCriticTorchRLModule):
    """PPO's default module (IMPALA's too, as in RLlib)."""


class DefaultAPPOTorchRLModule(DefaultPPOTorchRLModule):
    """APPO's default module (its target network is the policy's copy, algorithms/appo)."""


#: RLlib's names before 2.40.
PPOTorchRLModule = DefaultPPOTorchRLModule
APPOTorchRLModule = DefaultAPPOTorchRLModule

#: Each default class by import path: given in a spec, the policy builds its own model.
DEFAULT_MODULE_PATHS = frozenset(
    f"{__name__}:{cls.__name__}" for cls in (DefaultActorCriticTorchRLModule,
                                             DefaultPPOTorchRLModule, DefaultAPPOTorchRLModule))

__all__ = ["APPOTorchRLModule", "DEFAULT_MODULE_PATHS", "DefaultAPPOTorchRLModule",
           "DefaultActorCriticTorchRLModule", "DefaultPPOTorchRLModule", "PPOTorchRLModule"]

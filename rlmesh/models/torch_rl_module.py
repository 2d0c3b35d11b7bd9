"""RLlib's ``ray.rllib.core.rl_module.torch.torch_rl_module.TorchRLModule``: an RLModule
that is a ``torch.nn.Module`` (its layers are parameters the learner trains)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from rlmesh.models.rl_module import RLModule


class TorchRLModule(nn.Module, RLModule):
    """Subclass it, build layers in ``setup`` and write ``_forward`` (docs/new_api_stack.md)."""

    framework = "torch"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        nn.Module.__init__(self)
        RLModule.__init__(self, *args, **kwargs)

    def forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """``forward_train`` (torch's ``module(batch)``)."""
        return self.forward_train(batch, **kwargs)

    def get_state(self, *args: Any, inference_only: bool = False, **kwargs: Any
                  ) -> dict[str, Any]:
        """The weights as numpy arrays by parameter name."""
        return {k: v.detach().cpu().numpy() for k, v in self.state_dict().items()}

    def set_state(self, state: dict[str, Any]) -> None:
        own = self.state_dict()
        self.load_state_dict({k: torch.as_tensor(np.asarray(v), dtype=own[k].dtype)
                              if k in own else torch.as_tensor(np.asarray(v))
                              for k, v in state.items()})


__all__ = ["TorchRLModule"]

"""A user's RLModule as DQN's Q network: ``QModuleModel`` gives the module the contract
DQN's policy calls on its ``QModel`` (``q_values(obs) -> [N, num_actions]`` for the loss,
``forward(obs) -> (Q, max Q)`` for acting; docs/new_api_stack.md).

The module gives its Q-values through ``compute_q_values(batch)`` (RLlib's QNetAPI) or,
without that method, ``_forward_train``; either returns a dict with ``"qf_preds"``
(``[B, num_actions]``). The same call serves acting and learning: DQN's policy explores
around the greedy action (epsilon-greedy, SoftQ), and its target network is a copy of the
whole model (a module's own ``forward_target`` is not called). A user's module runs plain Q
(``num_atoms`` 1) without noisy layers; the others are refused when the policy is built.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
from torch import nn

from rlmesh.models.default_modules import DQN_MODULE_DEFAULTS, QF_PREDS
from rlmesh.policy.module_model import torch_module_name
from rlmesh.rl.columns import Columns

#: The module a DQN spec without module_class builds (given spaces or load_state_path).
DEFAULT_Q_MODULE = "rlmesh.models.default_modules:DefaultDQNTorchRLModule"


class QModuleModel(nn.Module):
    """DQN's Q-network contract around ``module`` (an RLModule that is a torch.nn.Module)."""

    num_atoms = 1

    def __init__(self, module: Any, num_actions: int) -> None:
        super().__init__()
        name = torch_module_name(module)
        self.module = module
        self.module_name = name
        self.num_actions = num_actions
        compute = getattr(module, "compute_q_values", None)
        self._method = "compute_q_values" if compute is not None else "_forward_train"
        self._compute = compute if compute is not None else module.forward_train

    def q_values(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values ``[N, num_actions]`` of ``obs``."""
        out = self._compute({Columns.OBS: obs})
        if not isinstance(out, dict):
            raise TypeError(f"{self.module_name}.{self._method} returned "
                            f"{type(out).__name__}; return a dict with {QF_PREDS!r} "
                            f"(Q-values [B, {self.num_actions}])")
        q = out.get(QF_PREDS)
        if q is None:
            raise ValueError(f"{self.module_name}.{self._method} returned no {QF_PREDS!r}, the "
                           f"Q-values [B, {self.num_actions}] DQN trains and acts on; it returned "
                           f"{sorted(out)} (define compute_q_values(batch) -> {{{QF_PREDS!r}: "
                           f"...}}, RLlib's QNetAPI, or return {QF_PREDS!r} from _forward_train)")
        return q

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = self.q_values(obs)
        return q, q.max(-1).values


def check_q_settings(data: dict[str, Any], config: Any) -> None:
    """A user's module runs plain Q without noisy layers: one line otherwise."""
    name = str(data.get("module_class") or DEFAULT_Q_MODULE).rpartition(":")[2]
    own = data.get("model_config") or {}
    num_atoms = own.get("num_atoms", config.num_atoms)
    noisy = own.get("noisy", config.noisy)
    if num_atoms != 1:
        raise ValueError(f"num_atoms: a user's RLModule ({name}) runs DQN with num_atoms=1 "
                          f"only (its 'qf_preds' are Q-values), got {num_atoms}; distributional "
                          "DQN runs with DQN's own network (no rl_module_spec, or "
                          "DefaultDQNTorchRLModule itself)")
    if noisy:
        raise ValueError(f"noisy: a user's RLModule ({name}) runs DQN without noisy nets; "
                          "noisy=True runs with DQN's own network (no rl_module_spec, or "
                          "DefaultDQNTorchRLModule itself)")


def dqn_model_config(config: Any) -> dict[str, Any]:
    """What a DQN module gets as model_config (its spec's own over it): rlmesh's model keys,
    the other model_config keys, and DQN's network settings (hiddens, dueling, ...)."""
    return {**{k: getattr(config, k) for k in DQN_MODULE_DEFAULTS},
            **config.model, **getattr(config, "module_model_config", {})}


def build_q_module_model(data: dict[str, Any], obs_space: gym.Space,
                         action_space: gym.Space, config: Any) -> QModuleModel:
    """``data``'s module (policy/module_model.py's spec data) on these spaces, as DQN's Q
    network, its Q-values checked on two sampled observations."""
    from rlmesh.policy.module_model import build_module
    from rlmesh.rl.default_model import sample_obs_batch

    check_q_settings(data, config)
    module = build_module(data, obs_space, action_space, dqn_model_config(config),
                          DEFAULT_Q_MODULE)
    n = int(action_space.n)
    model = QModuleModel(module, n)
    with torch.no_grad():
        q = model.q_values(sample_obs_batch(obs_space, 2))
    if not isinstance(q, torch.Tensor) or tuple(q.shape) != (2, n):
        got = tuple(q.shape) if isinstance(q, torch.Tensor) else type(q).__name__
        raise ValueError(f"{model.module_name}.{model._method}: for 2 observations "
                         f"{QF_PREDS!r} must be a tensor of shape (2, {n}) (one Q-value per "
                         f"action), got {got}")
    return model


__all__ = ["QModuleModel", "build_q_module_model", "check_q_settings", "dqn_model_config"]

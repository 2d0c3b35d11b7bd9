"""A user's RLModule as SAC's networks: ``SACModuleModel`` gives the module the contract
SAC's policy calls on its own ModuleDict (``model["actor"](obs)`` -> distribution inputs,
``model["q"](obs, actions)`` -> each Q network's estimate and ``.min``, ``model.log_alpha``).

The module gives
- the actor through ``forward_exploration`` (``_forward``): ``Columns.ACTION_DIST_INPUTS``
  of ``batch[Columns.OBS]``: ``[B, 2 * dim(A)]`` (a tanh-squashed Gaussian's mean and
  log-std) for Box actions, logits ``[B, n]`` for Discrete ones;
- Q through ``compute_q_values(batch)`` (RLlib's QNetAPI) on ``Columns.OBS`` and, for Box
  actions, ``Columns.ACTIONS``: ``"qf_preds"`` ``[B]`` (``[B, n]``, every action's, for
  Discrete actions) and, for twin Q, ``"qf_twin_preds"`` alike.

SAC steps the actor and the critics with an optimizer each, so the actor's parameters and
the critics' must be apart: which are which is read from the module's graph once, at build.
The target critics are a copy of the whole module (only the critics' parameters follow the
online ones); a module's own ``forward_target`` is not called. The state dict is the
module's under ``module.`` (checkpoints' module dirs) and ``log_alpha``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlmesh.models.default_modules import QF_PREDS, QF_TWIN_PREDS, SAC_MODULE_DEFAULTS
from rlmesh.policy.module_model import torch_module_name
from rlmesh.rl.columns import Columns

#: The pass the actor is (by name: a literal call of it reads to tests/unit/
#: test_protocol_table.py as a remote call).
_ACTOR_PASS = "forward_exploration"

#: The module a SAC spec without module_class builds (given spaces or load_state_path).
DEFAULT_SAC_MODULE = "rlmesh.models.default_modules:DefaultSACTorchRLModule"


class _View(nn.Module):
    """The module seen as one of SAC's networks: its forward, and ``parameters()`` the
    ones that network owns (by name, so a deep copy's line up with the original's)."""

    def __init__(self, module: nn.Module, names: list[str]) -> None:
        super().__init__()
        self.module = module
        self.names = names

    def parameters(self, recurse: bool = True) -> Iterator[nn.Parameter]:
        own = dict(self.module.named_parameters())
        return iter([own[n] for n in self.names])


class ActorView(_View):
    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return getattr(self.module, _ACTOR_PASS)({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]


class QView(_View):
    def forward(self, obs: torch.Tensor, actions: torch.Tensor | None = None
                ) -> list[torch.Tensor]:
        batch = {Columns.OBS: obs}
        if actions is not None:
            batch[Columns.ACTIONS] = actions
        out = self.module.compute_q_values(batch)
        qs = [out[QF_PREDS]]
        if out.get(QF_TWIN_PREDS) is not None:
            qs.append(out[QF_TWIN_PREDS])
        return qs

    def min(self, obs: torch.Tensor, actions: torch.Tensor | None = None) -> torch.Tensor:
        qs = self(obs, actions)
        return qs[0] if len(qs) == 1 else torch.minimum(qs[0], qs[1])


class SACModuleModel(nn.Module):
    """SAC's ModuleDict contract around ``module``: ``self["actor"]``, ``self["q"]``,
    ``self.log_alpha``."""

    def __init__(self, module: Any, actor_names: list[str], q_names: list[str],
                 initial_alpha: float) -> None:
        super().__init__()
        self.module = module
        self.module_name = type(module).__name__
        self.register_parameter("log_alpha", nn.Parameter(torch.tensor(np.log(initial_alpha),
                                                                        dtype=torch.float32)))
        # The views are not submodules: the state dict holds the module's weights once.
        self.__dict__["_views"] = {"actor": ActorView(module, actor_names),
                                   "q": QView(module, q_names)}

    def __getitem__(self, key: str) -> nn.Module:
        return self.__dict__["_views"][key]

    def keys(self) -> list[str]:
        return list(self.__dict__["_views"])


def _reached(module: nn.Module, output: torch.Tensor) -> list[str]:
    """The names of the parameters ``output`` depends on."""
    named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
    grads = torch.autograd.grad(output.sum(), [p for _, p in named], allow_unused=True)
    return [n for (n, _), g in zip(named, grads) if g is not None]


def sac_model_config(config: Any) -> dict[str, Any]:
    """What a SAC module gets as model_config (its spec's own over it): SAC's network
    settings (twin_q, q_model_config, ...), rlmesh's model keys and the other model_config keys."""
    return {**{k: getattr(config, k) for k in SAC_MODULE_DEFAULTS},
            **config.model, **getattr(config, "module_model_config", {})}


def build_sac_module_model(data: dict[str, Any], obs_space: gym.Space,
                           action_space: gym.Space, config: Any) -> SACModuleModel:
    """``data``'s module on these spaces as SAC's networks, its outputs checked on two
    sampled observations: one line naming the method and what it must return."""
    from rlmesh.policy.module_model import build_module
    from rlmesh.rl.default_model import sample_obs_batch

    module = build_module(data, obs_space, action_space, sac_model_config(config),
                          DEFAULT_SAC_MODULE)
    name = torch_module_name(module)
    if not callable(getattr(module, "compute_q_values", None)):
        raise TypeError(f"{name} has no compute_q_values(batch): SAC's critics are "
                        f"{QF_PREDS!r} (and {QF_TWIN_PREDS!r} for twin Q) of "
                        "compute_q_values (RLlib's QNetAPI)")
    discrete = isinstance(action_space, gym.spaces.Discrete)
    n = int(action_space.n) if discrete else 2 * int(np.prod(action_space.shape))
    obs = sample_obs_batch(obs_space, 2)
    out = getattr(module, _ACTOR_PASS)({Columns.OBS: obs})
    logits = out.get(Columns.ACTION_DIST_INPUTS) if isinstance(out, dict) else None
    if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (2, n):
        got = (tuple(logits.shape) if isinstance(logits, torch.Tensor)
               else f"keys {sorted(out)}" if isinstance(out, dict) else type(out).__name__)
        raise ValueError(f"{name}._forward_exploration: for 2 observations "
                         f"{Columns.ACTION_DIST_INPUTS!r} must have shape (2, {n}) (SAC's "
                         f"actor: {'logits' if discrete else 'mean and log-std'}), got {got}")
    actions = None if discrete else torch.as_tensor(
        np.stack([action_space.sample() for _ in range(2)]), dtype=torch.float32)
    batch = {Columns.OBS: obs, **({} if actions is None else {Columns.ACTIONS: actions})}
    q_out = module.compute_q_values(batch)
    want = (2, int(action_space.n)) if discrete else (2,)
    for key in (QF_PREDS, QF_TWIN_PREDS):
        q = q_out.get(key) if isinstance(q_out, dict) else None
        if q is None and key == QF_TWIN_PREDS:
            continue
        if not isinstance(q, torch.Tensor) or tuple(q.shape) != want:
            got = (tuple(q.shape) if isinstance(q, torch.Tensor) else
                   f"no {key!r} (keys {sorted(q_out)})" if isinstance(q_out, dict)
                   else type(q_out).__name__)
            raise ValueError(f"{name}.compute_q_values: for 2 observations {key!r} must "
                             f"have shape {want} ({'every action' if discrete else 'Q(s, a)'}"
                             f"), got {got}")
    actor_names = _reached(module, logits)
    q_names = _reached(module, sum(v.sum() for k, v in q_out.items()
                                   if k in (QF_PREDS, QF_TWIN_PREDS) and v is not None))
    shared = sorted(set(actor_names) & set(q_names))
    if shared:
        raise ValueError(f"{name}: SAC steps the actor and the critics with separate "
                         f"optimizers, but both read {shared[:3]}{'...' if len(shared) > 3 else ''}"
                         "; give each its own layers (RLlib's SAC module does too)")
    if not actor_names or not q_names:
        raise ValueError(f"{name}: the {'actor' if not actor_names else 'critics'} "
                         "has no trainable parameters")
    return SACModuleModel(module, actor_names, q_names, float(config.initial_alpha))


__all__ = ["SACModuleModel", "build_sac_module_model"]

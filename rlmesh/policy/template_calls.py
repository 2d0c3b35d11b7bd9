"""How the policy template calls the user's acting functions: ``compute_actions`` built from
``action_sampler_fn`` / ``extra_action_out_fn``, with RLlib's arguments, and the functions
whose arity changed across RLlib versions called by the arity the user wrote."""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

import numpy as np
import torch

from rlmesh.rl.columns import Columns


def call_by_arity(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn`` with as many of ``args`` as it takes positionally (RLlib's
    ``extra_action_out_fn`` took ``(policy)``, then ``(policy, input_dict, state_batches,
    model)``, then also ``action_dist``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: give it everything
        return fn(*args)
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return fn(*args)
    n = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
    return fn(*args[:n])


@functools.lru_cache(maxsize=None)
def taking_model(dist_class: type) -> type:
    """``dist_class`` that also takes RLlib's second argument, ``dist_class(inputs, model)``
    (the model is not needed to build rlmesh's distributions)."""
    if getattr(dist_class, "_takes_model", False):
        return dist_class

    def __init__(self: Any, inputs: Any, model: Any = None) -> None:
        dist_class.__init__(self, inputs)

    return type(dist_class.__name__, (dist_class,), {
        "__init__": __init__, "_takes_model": True, "__module__": dist_class.__module__,
        "__qualname__": dist_class.__qualname__, "__doc__": dist_class.__doc__})


def sampler_outputs(out: Any) -> tuple[Any, Any, Any, list[Any]]:
    """``action_sampler_fn``'s result as ``(actions, logp, dist_inputs, state_out)``: RLlib's
    torch template returns ``(actions, logp, state_out)``, later ones ``(actions, logp,
    dist_inputs, state_out)``, the TF one ``(actions, logp)``."""
    if isinstance(out, tuple) and len(out) == 2:
        return out[0], out[1], None, []
    if isinstance(out, tuple) and len(out) == 3:
        return out[0], out[1], None, list(out[2] or [])
    if isinstance(out, tuple) and len(out) == 4:
        return out[0], out[1], out[2], list(out[3] or [])
    got = f"{len(out)} values" if isinstance(out, tuple) else type(out).__name__
    raise TypeError(f"action_sampler_fn returned {got}; return (actions, logp), (actions, logp, "
                    "state_out) or (actions, logp, dist_inputs, state_out)")


def acting_method(fns: dict[str, Any]) -> Callable[..., Any]:
    """The template's ``compute_actions``: the sampler or the model's distribution, then
    the extra outputs."""

    def compute_actions(self: Any, obs_batch: Any, state_batches: Any = None,
                        prev_action_batch: Any = None, prev_reward_batch: Any = None,
                        explore: bool | None = None, timestep: int | None = None,
                        **kwargs: Any) -> tuple[np.ndarray, list, dict]:
        explore = self.config.explore if explore is None else explore
        timestep = self.global_timestep if timestep is None else timestep
        obs = torch.as_tensor(np.asarray(obs_batch), device=self.device)
        input_dict = _input_dict(self, obs, prev_action_batch, prev_reward_batch)
        states = list(state_batches or [])
        dist = None
        with torch.no_grad():
            if fns["action_sampler_fn"] is not None:
                actions, logp, dist_inputs, state_out = sampler_outputs(fns["action_sampler_fn"](
                    self, self.model, input_dict, states, explore=explore, timestep=timestep))
                extras = {k: v for k, v in ((Columns.ACTION_LOGP, logp),
                                            (Columns.ACTION_DIST_INPUTS, dist_inputs))
                          if v is not None}
            else:
                if self.recurrent:
                    inputs, state_out = self._step_recurrent(obs, state_batches, prev_action_batch,
                                                             prev_reward_batch)
                else:
                    inputs, state_out = self.model(obs)[0], []
                dist = self.dist_class.from_inputs(inputs)
                actions = dist.sample() if explore else dist.deterministic_sample()
                extras = {Columns.ACTION_LOGP: dist.logp(actions),
                          Columns.ACTION_DIST_INPUTS: inputs}
            if fns["extra_action_out_fn"] is not None:
                extras.update(call_by_arity(fns["extra_action_out_fn"], self, input_dict, states,
                                            self.model, dist) or {})
        return (_numpy(actions).astype(self.action_dtype, copy=False),
                [_numpy(s) for s in state_out], {k: _numpy(v) for k, v in extras.items()})

    return compute_actions


def _input_dict(policy: Any, obs: torch.Tensor, prev_actions: Any, prev_rewards: Any
                ) -> dict[str, Any]:
    """RLlib's ``input_dict`` of one acting call: the observations and, where given, the
    previous actions and rewards, as tensors."""
    out: dict[str, Any] = {Columns.OBS: obs, "is_training": False}
    for key, value in ((Columns.PREV_ACTIONS, prev_actions), (Columns.PREV_REWARDS, prev_rewards)):
        if value is not None:
            out[key] = torch.as_tensor(np.asarray(value), device=policy.device)
    return out


def _numpy(x: Any) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    x = np.asarray(x)
    return x.astype(np.float32) if x.dtype == np.float64 else x

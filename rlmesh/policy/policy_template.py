"""``build_policy``: a ``TorchPolicy`` subclass from functions (RLlib's policy template), and
``with_updates`` to derive another from it. The class is made in the caller's module: assign it
to a module-level name equal to ``name``, since other processes import it by that path."""

from __future__ import annotations

import sys
from typing import Any, Callable

import numpy as np
import torch

from rlmesh.policy.torch_policy import TorchPolicy
from rlmesh.rl.columns import Columns

#: The functions build_policy takes, each optional but loss_fn.
TEMPLATE_FUNCTIONS = ("loss_fn", "get_default_config", "postprocess_fn", "stats_fn",
                      "extra_action_out_fn", "gradients_fn", "optimizer_fn", "make_model",
                      "action_sampler_fn", "before_init", "after_init")


def build_policy(name: str, loss_fn: Callable[..., Any], *,
                 get_default_config: Callable[[], dict] | None = None,
                 postprocess_fn: Callable[..., Any] | None = None,
                 stats_fn: Callable[..., dict] | None = None,
                 extra_action_out_fn: Callable[..., dict] | None = None,
                 gradients_fn: Callable[..., dict] | None = None,
                 optimizer_fn: Callable[..., Any] | None = None,
                 make_model: Callable[..., torch.nn.Module] | None = None,
                 action_sampler_fn: Callable[..., Any] | None = None,
                 before_init: Callable[..., None] | None = None,
                 after_init: Callable[..., None] | None = None,
                 mixins: list[type] | None = None,
                 base: type[TorchPolicy] = TorchPolicy,
                 _module: str | None = None) -> type[TorchPolicy]:
    """A policy class named ``name`` whose loss is ``loss_fn(policy, model, dist_class,
    train_batch) -> loss``. The others, with RLlib's signatures:

    - ``postprocess_fn(policy, sample_batch, other_agent_batches=None, episode=None)``: one
      trajectory's samples with columns added (returns, advantages), before the loss;
    - ``stats_fn(policy, train_batch) -> dict``: what to report (default: the loss);
    - ``extra_action_out_fn(policy, input_dict, state_batches, model, action_dist) -> dict``:
      extra action outputs, each a sample column;
    - ``gradients_fn(policy, optimizer, loss) -> dict``: runs after the backward pass, before
      the step (clip or inspect gradients; RLlib's ``extra_grad_process_fn``);
    - ``optimizer_fn(policy, config)``, ``make_model(policy, obs_space, action_space, config)``;
    - ``action_sampler_fn(policy, model, obs_batch, state_batches, explore, timestep) ->
      (actions, logp, state_out)``: acting without the distribution;
    - ``before_init`` / ``after_init(policy, obs_space, action_space, config)``;
    - ``mixins``: classes put before the base, for methods and state;
    - ``get_default_config() -> dict``: config values an algorithm built with this policy
      (``build_algorithm``) starts from.
    """
    functions = {k: v for k, v in locals().items() if k in TEMPLATE_FUNCTIONS}
    body: dict[str, Any] = {"_template": functions, "_template_mixins": list(mixins or ()),
                            "_template_base": base, "__module__": _module or _caller_module()}
    body.update(_methods(functions))
    cls = type(name, (*(mixins or ()), base), body)
    cls.__qualname__ = name
    cls.with_updates = classmethod(_with_updates)  # type: ignore[attr-defined]
    return cls


def template_defaults(policy_cls: Any) -> dict[str, Any]:
    """The config values an algorithm built with ``policy_cls`` starts from: its template's
    ``get_default_config()``; {} for a class not built by ``build_policy``."""
    fn = getattr(policy_cls, "_template", {}).get("get_default_config")
    return dict(fn()) if fn is not None else {}


def _with_updates(cls: type, **overrides: Any) -> type[TorchPolicy]:
    """A new policy class: this template's functions with ``overrides`` (``name=`` too)."""
    unknown = set(overrides) - {*TEMPLATE_FUNCTIONS, "name", "mixins", "base"}
    if unknown:
        raise TypeError(f"with_updates: unknown arguments {sorted(unknown)}; it takes name, "
                        f"mixins, base and {', '.join(TEMPLATE_FUNCTIONS)}")
    functions = {**cls._template, **{k: v for k, v in overrides.items() if k in TEMPLATE_FUNCTIONS}}
    return build_policy(overrides.get("name", cls.__name__),
                        mixins=overrides.get("mixins", cls._template_mixins),
                        base=overrides.get("base", cls._template_base),
                        _module=_caller_module(), **functions)


def _methods(fns: dict[str, Any]) -> dict[str, Any]:
    """The TorchPolicy methods the given functions replace."""
    methods: dict[str, Any] = {}

    def __init__(self: TorchPolicy, observation_space: Any, action_space: Any, config: Any,
                 **kwargs: Any) -> None:
        if fns["before_init"] is not None:
            fns["before_init"](self, observation_space, action_space, config)
        type(self)._template_base.__init__(self, observation_space, action_space, config, **kwargs)
        if fns["after_init"] is not None:
            fns["after_init"](self, observation_space, action_space, config)

    methods["__init__"] = __init__

    def loss(self: TorchPolicy, train_batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        total = fns["loss_fn"](self, self.model, self.dist_class, train_batch)
        if isinstance(total, (list, tuple)):
            total = sum(total)
        stats = (fns["stats_fn"](self, train_batch) if fns["stats_fn"] is not None
                 else {"total_loss": total.detach()})
        self._last_loss = total
        return total, stats

    methods["loss"] = loss
    if fns["postprocess_fn"] is not None:
        def postprocess_trajectory(self: TorchPolicy, sample_batch: Any,
                                   other_agent_batches: Any = None, episode: Any = None) -> Any:
            return fns["postprocess_fn"](self, sample_batch, other_agent_batches, episode)

        methods["postprocess_trajectory"] = postprocess_trajectory
    if fns["gradients_fn"] is not None:
        def extra_grad_process(self: TorchPolicy) -> dict[str, Any]:
            stats = TorchPolicy.extra_grad_process(self)
            return {**stats, **(fns["gradients_fn"](self, self.optimizer, self._last_loss) or {})}

        methods["extra_grad_process"] = extra_grad_process
    if fns["optimizer_fn"] is not None:
        methods["make_optimizer"] = lambda self: fns["optimizer_fn"](self, self.config)
    if fns["make_model"] is not None:
        methods["make_model"] = lambda self: fns["make_model"](
            self, self.observation_space, self.action_space, self.config)
    if fns["action_sampler_fn"] is not None or fns["extra_action_out_fn"] is not None:
        methods["compute_actions"] = _compute_actions(fns)
    return methods


def _compute_actions(fns: dict[str, Any]) -> Callable[..., Any]:
    def compute_actions(self: TorchPolicy, obs_batch: np.ndarray, state_batches: Any = None,
                        prev_action_batch: Any = None, prev_reward_batch: Any = None,
                        explore: bool | None = None, timestep: int | None = None,
                        **kwargs: Any) -> tuple[np.ndarray, list, dict]:
        explore = self.config.explore if explore is None else explore
        obs = torch.as_tensor(np.asarray(obs_batch), device=self.device)
        with torch.no_grad():
            if fns["action_sampler_fn"] is not None:
                actions, logp, state_out = fns["action_sampler_fn"](
                    self, self.model, obs, state_batches or [], explore, timestep)
                extras: dict[str, Any] = {} if logp is None else {Columns.ACTION_LOGP: logp}
                dist, inputs = None, None
            else:
                inputs = self.model(obs)[0]
                dist = self.dist_class.from_inputs(inputs)
                actions = dist.sample() if explore else dist.deterministic_sample()
                extras = {Columns.ACTION_LOGP: dist.logp(actions),
                          Columns.ACTION_DIST_INPUTS: inputs}
                state_out = []
            if fns["extra_action_out_fn"] is not None:
                extras.update(fns["extra_action_out_fn"](self, {"obs": obs}, state_batches or [],
                                                         self.model, dist))
        return (_numpy(actions), [_numpy(s) for s in state_out],
                {k: _numpy(v) for k, v in extras.items()})

    return compute_actions


def _numpy(x: Any) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    x = np.asarray(x)
    return x.astype(np.float32) if x.dtype == np.float64 else x


def _caller_module() -> str:
    """The module of the code that called the template (where the class will live)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") in _TEMPLATE_MODULES:
        frame = frame.f_back
    return frame.f_globals.get("__name__", "__main__") if frame is not None else "__main__"


_TEMPLATE_MODULES = {__name__, "rlmesh.algorithms.algorithm_template"}

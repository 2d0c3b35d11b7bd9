"""``build_policy``: a ``TorchPolicy`` subclass from functions (RLlib's policy template, under
RLlib's keyword names), and ``with_updates``, which derives a class from any policy class.
The class is made in the caller's module: assign it to a module-level name (``name``, or
any other: other processes import it by the name it is assigned to)."""

from __future__ import annotations

import sys
from typing import Any, Callable

import torch

from rlmesh.policy.template_calls import acting_method, call_by_arity, taking_model
from rlmesh.policy.torch_policy import TorchPolicy
from rlmesh.policy.model_api import add_model_v2_api

#: The functions build_policy takes, each optional but loss_fn (RLlib's names and arities,
#: see build_policy's docstring); ``gradients_fn`` is rlmesh's older name of
#: ``extra_grad_process_fn``.
TEMPLATE_FUNCTIONS = ("loss_fn", "get_default_config", "postprocess_fn", "stats_fn",
                      "extra_action_out_fn", "extra_grad_process_fn", "gradients_fn",
                      "extra_learn_fetches_fn", "optimizer_fn", "make_model",
                      "make_model_and_action_dist", "action_sampler_fn", "validate_spaces",
                      "before_init", "before_loss_init", "after_init")
#: Keywords of RLlib's TF template, with what to write here instead.
TF_ONLY = {"extra_action_fetches_fn": "extra_action_out_fn",
           "extra_action_feed_fn": "action_sampler_fn (it receives explore and timestep)",
           "grad_stats_fn": "extra_grad_process_fn (return the statistics from it)",
           "obs_include_prev_action_reward": "view_requirements = {'prev_actions': None, "
                                             "'prev_rewards': None} on a mixin"}


def build_policy(name: str, loss_fn: Callable[..., Any] | None = None, *,
                 mixins: list[type] | None = None, base: type[TorchPolicy] = TorchPolicy,
                 _module: str | None = None, **functions: Callable[..., Any] | None
                 ) -> type[TorchPolicy]:
    """A policy class named ``name`` whose loss is ``loss_fn(policy, model, dist_class,
    train_batch) -> loss`` (or a list of losses, summed). The others, RLlib's torch ones:

    - ``postprocess_fn(policy, sample_batch, other_agent_batches=None, episode=None)``: one
      trajectory's samples with columns added (``compute_advantages``), before the loss;
    - ``stats_fn(policy, train_batch) -> dict``: what to report (default: the loss);
    - ``extra_action_out_fn(policy, input_dict, state_batches, model[, action_dist]) ->
      dict`` (or ``(policy)``): extra action outputs, each a sample column;
    - ``extra_grad_process_fn(policy, optimizer, loss) -> dict``: after the backward pass,
      before the step (clip or inspect gradients), after ``grad_clip``'s clipping if set;
    - ``extra_learn_fetches_fn(policy) -> dict``: more statistics after each loss;
    - ``optimizer_fn(policy, config)``; ``make_model(policy, obs_space, action_space,
      config)`` or ``make_model_and_action_dist(...) -> (model, dist_class)``;
    - ``action_sampler_fn(policy, model, input_dict, state_batches, explore=, timestep=)
      -> (actions, logp[, dist_inputs], state_out)`` or ``(actions, logp)``;
    - ``validate_spaces``, ``before_init``, ``before_loss_init`` (after the model is
      built), ``after_init``: each ``(policy, obs_space, action_space, config)``;
    - ``mixins``: classes put before ``base``, for methods and state (their ``__init__``
      is the user's to call, as RLlib's ``setup_mixins`` does);
    - ``get_default_config() -> dict``: config values an algorithm built with this policy
      (``build_algorithm``) starts from.

    The model handed to the functions also answers ``model.from_batch(train_batch) ->
    (dist_inputs, [])`` and ``model.value_function()`` (the values of its last forward
    pass); ``dist_class(inputs)`` and ``dist_class(inputs, model)`` both build the
    distribution. RLlib's ``build_torch_policy`` is this (``torch_policy_template.py``).
    """
    fns = check_functions(functions, where=f"build_policy({name!r})")
    fns["loss_fn"] = loss_fn
    if loss_fn is None and "loss" not in _overridden(base):
        raise TypeError(f"build_policy({name!r}) needs loss_fn=f(policy, model, dist_class, "
                        "train_batch) -> loss")
    body: dict[str, Any] = {"_template": fns, "_template_mixins": list(mixins or ()),
                            "_template_base": base, "__module__": _module or _caller_module()}
    body.update(_methods(fns, base))
    cls = type(name, (*(mixins or ()), base), body)
    cls.__qualname__ = name
    return bind_in_module(cls)


def check_functions(functions: dict[str, Any], where: str) -> dict[str, Any]:
    """The template functions by name (None where not given), or one line naming the
    keyword that is wrong and what to write instead."""
    for key in functions:
        if key in TF_ONLY:
            raise TypeError(f"{where}: {key} is a TensorFlow template keyword; rlmesh's "
                            f"templates are torch: use {TF_ONLY[key]}")
        if key not in TEMPLATE_FUNCTIONS:
            raise TypeError(f"{where}: unknown keyword {key!r}; the template takes name, "
                            f"mixins and {', '.join(TEMPLATE_FUNCTIONS)}")
    if functions.get("gradients_fn") and functions.get("extra_grad_process_fn"):
        raise TypeError(f"{where}: gradients_fn and extra_grad_process_fn are one hook; "
                        "give extra_grad_process_fn only")
    fns = {k: functions.get(k) for k in TEMPLATE_FUNCTIONS}
    fns["extra_grad_process_fn"] = fns.pop("gradients_fn") or fns["extra_grad_process_fn"]
    return fns


def bind_in_module(cls: type) -> type:
    """``cls`` bound in its module under its name too, where that name is free: RLlib's
    docs assign a built class to another name (``MyTrainer = build_trainer(name=
    "MyCustomTrainer")``), and other processes, checkpoints and Tune import it by
    ``module:name``. Running the module again (a child process) binds it again."""
    module = sys.modules.get(cls.__module__)
    if module is not None and not hasattr(module, cls.__qualname__):
        setattr(module, cls.__qualname__, cls)
    return cls


def template_defaults(policy_cls: Any) -> dict[str, Any]:
    """The config values an algorithm built with ``policy_cls`` starts from: its template's
    ``get_default_config()``; {} for a class not built by ``build_policy``."""
    fn = getattr(policy_cls, "_template", {}).get("get_default_config")
    return dict(fn()) if fn is not None else {}


def with_updates(cls: type, **overrides: Any) -> type:
    """A new policy class: ``cls``'s template functions with ``overrides`` (``name=`` and
    ``mixins=`` too). ``cls`` need not be template-built: a ``TorchPolicy`` subclass (PPO's,
    DQN's, ...) gets a subclass whose methods the given functions replace (``loss_fn`` its
    ``loss``, ``postprocess_fn`` its batch preparation, and so on), the rest its own. Any
    other ``Policy`` subclass takes ``name`` and ``mixins`` only."""
    name = overrides.pop("name", cls.__name__)
    mixins = overrides.pop("mixins", None)
    base = overrides.pop("base", None)
    module = _caller_module()
    own = cls.__dict__.get("_template")
    if own is not None:  # template-built: rebuilt from its functions
        fns = {k: v for k, v in own.items() if v is not None}
        fns.update({k: v for k, v in check_functions(overrides, f"{cls.__name__}.with_updates")
                    .items() if v is not None})
        return build_policy(name, base=base or cls._template_base,
                            mixins=cls._template_mixins if mixins is None else mixins,
                            _module=module, **fns)
    if isinstance(cls, type) and issubclass(cls, TorchPolicy):
        fns = {k: v for k, v in check_functions(overrides, f"{cls.__name__}.with_updates").items()
               if v is not None}
        return build_policy(name, base=cls, mixins=mixins, _module=module, **fns)
    if overrides:
        raise TypeError(f"{cls.__name__}.with_updates: {cls.__name__} is not a TorchPolicy, so "
                        f"there is no loss or model to swap ({sorted(overrides)}); it takes name "
                        "and mixins: override its methods in a subclass instead")
    new = type(name, (*(mixins or ()), cls), {"__module__": module})
    new.__qualname__ = name
    return bind_in_module(new)


def _overridden(base: type) -> set[str]:
    """The TorchPolicy methods ``base`` (or a class between it and TorchPolicy) defines."""
    names: set[str] = set()
    for klass in base.__mro__:
        if klass is TorchPolicy:
            break
        names.update(klass.__dict__)
    return names


def _methods(fns: dict[str, Any], base: type[TorchPolicy]) -> dict[str, Any]:
    """The TorchPolicy methods the given functions replace."""
    methods: dict[str, Any] = {"__init__": _init(fns, base)}
    if fns["loss_fn"] is not None:
        methods["loss"] = _loss(fns)
    if fns["postprocess_fn"] is not None:
        def postprocess_trajectory(self: TorchPolicy, sample_batch: Any,
                                   other_agent_batches: Any = None, episode: Any = None) -> Any:
            return fns["postprocess_fn"](self, sample_batch, other_agent_batches, episode)

        methods["postprocess_trajectory"] = postprocess_trajectory
        # The base's own batch preparation (PPO's GAE over the time-major batch) and the
        # statistics that read its columns give way to RLlib's per-trajectory flow.
        methods["prepare_batch"] = TorchPolicy.prepare_batch
        methods["update_stats"] = TorchPolicy.update_stats
    if fns["extra_grad_process_fn"] is not None:
        def extra_grad_process(self: TorchPolicy) -> dict[str, Any]:
            stats = TorchPolicy.extra_grad_process(self)  # grad_clip's clipping, if set
            return {**stats, **(fns["extra_grad_process_fn"](self, self.optimizer,
                                                             self._last_loss) or {})}

        methods["extra_grad_process"] = extra_grad_process
    if fns["optimizer_fn"] is not None:
        methods["make_optimizer"] = lambda self: fns["optimizer_fn"](self, self.config)
    if fns["make_model"] is not None:
        methods["make_model"] = lambda self: fns["make_model"](
            self, self.observation_space, self.action_space, self.config)
    elif fns["make_model_and_action_dist"] is not None:
        def make_model(self: TorchPolicy) -> torch.nn.Module:
            model, self._template_dist = fns["make_model_and_action_dist"](
                self, self.observation_space, self.action_space, self.config)
            return model

        methods["make_model"] = make_model
    if fns["action_sampler_fn"] is not None or fns["extra_action_out_fn"] is not None:
        methods["compute_actions"] = acting_method(fns)
    return methods


def _init(fns: dict[str, Any], base: type[TorchPolicy]) -> Callable[..., None]:
    def __init__(self: TorchPolicy, observation_space: Any, action_space: Any, config: Any,
                 **kwargs: Any) -> None:
        for hook in ("validate_spaces", "before_init"):
            if fns[hook] is not None:
                fns[hook](self, observation_space, action_space, config)
        base.__init__(self, observation_space, action_space, config, **kwargs)
        self.dist_class = taking_model(getattr(self, "_template_dist", None) or self.dist_class)
        add_model_v2_api(self.model)
        for hook in ("before_loss_init", "after_init"):
            if fns[hook] is not None:
                fns[hook](self, observation_space, action_space, config)

    return __init__


def _loss(fns: dict[str, Any]) -> Callable[..., tuple[torch.Tensor, dict]]:
    def loss(self: TorchPolicy, train_batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        total = fns["loss_fn"](self, self.model, self.dist_class, train_batch)
        if isinstance(total, (list, tuple)):
            total = sum(total)
        self._last_loss = total
        stats = (fns["stats_fn"](self, train_batch) if fns["stats_fn"] is not None
                 else {"total_loss": total.detach()})
        if fns["extra_learn_fetches_fn"] is not None:
            stats = {**stats, **call_by_arity(fns["extra_learn_fetches_fn"], self)}
        return total, stats

    return loss


def _caller_module() -> str:
    """The module of the code that called the template (where the class will live)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") in _TEMPLATE_MODULES:
        frame = frame.f_back
    return frame.f_globals.get("__name__", "__main__") if frame is not None else "__main__"


_TEMPLATE_MODULES = {__name__, "rlmesh.algorithms.algorithm_template", "rlmesh.policy.policy",
                     "rlmesh.policy.torch_policy_template", "rlmesh.agents.trainer_template",
                     "rlmesh.driver.algorithm", "rlmesh.algorithms.with_updates"}

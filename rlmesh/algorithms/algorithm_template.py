"""``build_algorithm``: an Algorithm from a default config, a default policy and a training
step or an execution plan (RLlib's trainer template), and ``with_updates``, which derives a
class from any Algorithm class (PPO's as well as a built one). The class is made in the
caller's module: assign it to a module-level name equal to ``name`` (checkpoints and
``rlmesh train --run pkg.module:Name`` find it by that path)."""

from __future__ import annotations

from typing import Any, Callable

from rlmesh.algorithms.execution import plan_iteration, plan_step, runners_act_as_learners
from rlmesh.config.base import AlgorithmConfig
from rlmesh.driver.algorithm import Algorithm
from rlmesh.driver.trainer_args import trainer_config
from rlmesh.policy.policy_template import _caller_module, bind_in_module, template_defaults

#: What build_algorithm and with_updates take besides ``name``.
TEMPLATE_ARGS = ("default_config", "default_policy", "training_step", "execution_plan",
                 "validate_config", "get_policy_class", "base")


def build_algorithm(name: str, *, default_config: type[AlgorithmConfig] | dict | None = None,
                    default_policy: Any = None,
                    training_step: Callable[[Algorithm], dict] | None = None,
                    execution_plan: Callable[[Any, Any], Any] | None = None,
                    validate_config: Callable[[Any], None] | None = None,
                    get_policy_class: Callable[[Any], Any] | None = None,
                    base: type[Algorithm] = Algorithm, _module: str | None = None) -> type[Algorithm]:
    """An Algorithm subclass named ``name``. ``default_config``: its config class, or a dict
    of values over ``base``'s config class defaults (a built policy's ``get_default_config``
    when not given); ``default_policy``: its policy class (or import path);
    ``training_step(algo)``: its iteration (``base.training_step`` when None), or instead
    ``execution_plan(workers, config)``: an iterator whose items are the iterations'
    results (``StandardMetricsReporting``) or a step's learner statistics
    (``algorithms/execution.py``), the runners acting with the policy class itself (a plan
    may ask them for gradients); ``validate_config(config)``: called on the
    config before anything starts (raise to refuse it); ``get_policy_class(config)``: the
    policy class for a config (None: ``default_policy``)."""
    if training_step is not None and execution_plan is not None:
        raise TypeError(f"build_algorithm({name!r}): give training_step or execution_plan, "
                        "not both (an execution plan is the iteration written as an iterator)")
    config_class, overrides = base.config_class, dict(getattr(base, "_config_overrides", {}))
    if isinstance(default_config, type):
        config_class, overrides = default_config, {}
    elif isinstance(default_config, dict):
        overrides = {**overrides, **default_config}
    elif default_policy is not None:
        overrides = {**overrides, **template_defaults(default_policy)}
    config_class.from_dict(overrides)  # an unknown key fails here, naming the closest
    args = {"default_config": default_config, "default_policy": default_policy,
            "training_step": training_step, "execution_plan": execution_plan,
            "validate_config": validate_config, "get_policy_class": get_policy_class,
            "base": base}
    body: dict[str, Any] = {"config_class": config_class, "_config_overrides": overrides,
                            "__module__": _module or _caller_module(), "_template": args,
                            "__init__": _init_with_defaults}
    if default_policy is not None:
        body["default_policy_class"] = default_policy
    if training_step is not None:
        body["training_step"] = lambda self: training_step(self)
    if execution_plan is not None:
        body["training_iteration"] = lambda self: plan_iteration(self, execution_plan)
        body["training_step"] = lambda self: plan_step(self, execution_plan)
        # A plan may ask the runners for gradients (AsyncGradients): torch, not numpy, there.
        body["_policy_specs"] = lambda self: runners_act_as_learners(
            super(cls, self)._policy_specs())
    if get_policy_class is not None:
        body["get_default_policy_class"] = classmethod(
            lambda cls, config: get_policy_class(config) or Algorithm.get_default_policy_class.__func__(cls, config))
    cls = type(name, (base,), body)
    cls.__qualname__ = name
    return bind_in_module(cls)


def with_updates(cls: type[Algorithm], **overrides: Any) -> type[Algorithm]:
    """A new algorithm class: ``cls``'s template arguments with ``overrides`` (``name=``
    too; default: ``cls``'s name). ``cls`` need not be template-built: PPO's and every
    built-in class derive a subclass whose default policy, config, training step or
    execution plan the given arguments replace."""
    unknown = set(overrides) - {"name", *TEMPLATE_ARGS}
    if unknown:
        raise TypeError(f"{cls.__name__}.with_updates: unknown arguments {sorted(unknown)}; it "
                        f"takes name and {', '.join(TEMPLATE_ARGS)}")
    own = cls.__dict__.get("_template")
    args: dict[str, Any] = dict(own) if own is not None else {"base": cls}
    if "training_step" in overrides or "execution_plan" in overrides:
        args.pop("training_step", None), args.pop("execution_plan", None)  # one replaces the other
    args.update(overrides)
    return build_algorithm(args.pop("name", cls.__name__), _module=_caller_module(), **args)


def _init_with_defaults(self: Algorithm, config: AlgorithmConfig | dict[str, Any] | None = None,
                        env: Any = None, **kwargs: Any) -> None:
    """The template's default values under the user's: a dict merges over them; a config
    object takes each default where it still holds its class default. ``env=`` (RLlib's
    Trainer argument) as ``Algorithm`` takes it; ``validate_config`` runs on the result."""
    cls = type(self)
    overrides = cls._config_overrides
    if config is None or isinstance(config, dict):
        config = trainer_config(cls.config_class, {**overrides, **(config or {})}, env)
    else:
        config = trainer_config(cls.config_class, config, env)
        if overrides:
            config, defaults = config.copy(), type(config)()
            for key, value in overrides.items():
                if config[key] == defaults[key]:  # by name or alias
                    config.update_from_dict({key: value})
    validate = _template_arg(cls, "validate_config")
    if validate is not None:
        validate(config)
    # The next __init__ after the template's: the base's own (a built-in class may have one).
    owner = next(k for k in cls.__mro__ if k.__dict__.get("__init__") is _init_with_defaults)
    super(owner, self).__init__(config, **kwargs)


def _template_arg(cls: type, key: str) -> Any:
    """``key`` of the nearest template in ``cls``'s bases."""
    for klass in cls.__mro__:
        template = klass.__dict__.get("_template")
        if template is not None and template.get(key) is not None:
            return template[key]
    return None


__all__ = ["build_algorithm", "with_updates"]

"""``build_algorithm``: an Algorithm from a default config, a default policy and a training
step (RLlib's trainer template), and ``with_updates`` to derive another. The class is made in
the caller's module: assign it to a module-level name equal to ``name`` (checkpoints and
``rlmesh train --run pkg.module:Name`` find it by that path)."""

from __future__ import annotations

from typing import Any, Callable

from rlmesh.driver.algorithm import Algorithm
from rlmesh.config.base import AlgorithmConfig
from rlmesh.policy.policy_template import _caller_module, template_defaults


def build_algorithm(name: str, *, default_config: type[AlgorithmConfig] | dict | None = None,
                    default_policy: Any = None,
                    training_step: Callable[[Algorithm], dict] | None = None,
                    base: type[Algorithm] = Algorithm, _module: str | None = None) -> type[Algorithm]:
    """An Algorithm subclass named ``name``. ``default_config``: its config class, or a dict
    of values over ``base``'s config class defaults (a built policy's ``get_default_config``
    when not given); ``default_policy``: its policy class (or import path);
    ``training_step(algo)``: its iteration (``Algorithm.training_step`` when None)."""
    config_class, overrides = base.config_class, {}
    if isinstance(default_config, type):
        config_class = default_config
    elif isinstance(default_config, dict):
        overrides = dict(default_config)
    elif default_policy is not None:
        overrides = template_defaults(default_policy)
    config_class.from_dict(overrides)  # an unknown key fails here, naming the closest
    body: dict[str, Any] = {"config_class": config_class, "_config_overrides": overrides,
                            "__module__": _module or _caller_module(),
                            "_template": {"default_config": default_config,
                                          "default_policy": default_policy,
                                          "training_step": training_step, "base": base}}
    if default_policy is not None:
        body["default_policy_class"] = default_policy
    if training_step is not None:
        body["training_step"] = lambda self: training_step(self)
    cls = type(name, (base,), body)
    cls.__qualname__ = name
    cls.with_updates = classmethod(_with_updates)  # type: ignore[attr-defined]
    cls.__init__ = _init_with_defaults  # type: ignore[method-assign]
    return cls


def _with_updates(cls: type, **overrides: Any) -> type[Algorithm]:
    """A new algorithm class: this template's arguments with ``overrides`` (``name=`` too)."""
    unknown = set(overrides) - {"name", "default_config", "default_policy", "training_step", "base"}
    if unknown:
        raise TypeError(f"with_updates: unknown arguments {sorted(unknown)}")
    args = {**cls._template, **overrides}
    return build_algorithm(args.pop("name", cls.__name__), _module=_caller_module(), **args)


def _init_with_defaults(self: Algorithm, config: AlgorithmConfig | dict[str, Any]) -> None:
    """The template's default values under the user's: a dict merges over them; a config
    object takes each default where it still holds its class default."""
    overrides = type(self)._config_overrides
    if isinstance(config, dict):
        config = type(self).config_class.from_dict({**overrides, **config})
    elif overrides:
        config = config.copy()
        defaults = type(config)()
        for key, value in overrides.items():
            if config[key] == defaults[key]:  # by name or alias
                config.update_from_dict({key: value})
    Algorithm.__init__(self, config)


__all__ = ["build_algorithm"]

"""RLlib's ``build_trainer`` at its Trainer-era path: an adapter of
``rlmesh.algorithms.algorithm_template.build_algorithm`` (RLlib's keyword names; the class is
an ``Algorithm``)."""

from __future__ import annotations

import sys
from typing import Any

from rlmesh.algorithms.algorithm_template import build_algorithm
from rlmesh.driver.algorithm import Algorithm
from rlmesh.policy.policy_template import _caller_module

#: build_trainer's keywords besides name.
KNOWN = ("default_config", "default_policy", "get_policy_class", "validate_config",
         "execution_plan", "training_step", "before_init", "after_init", "mixins")


def build_trainer(name: str, **kwargs: Any) -> type[Algorithm]:
    """RLlib's trainer template: ``build_algorithm(name, default_config=,
    default_policy=, execution_plan= or training_step=, validate_config=,
    get_policy_class=)``, plus ``mixins`` (classes before the algorithm's),
    ``before_init(trainer)`` (before its processes start; ``trainer.config`` is not set
    yet) and ``after_init(trainer)`` (once it is up). Assign the class to a module-level
    name equal to ``name``."""
    unknown = sorted(set(kwargs) - set(KNOWN))
    if unknown:
        raise TypeError(f"build_trainer({name!r}): unknown keyword(s) {unknown}; it takes "
                        f"name, {', '.join(KNOWN)}")
    module = _caller_module()
    mixins = list(kwargs.pop("mixins", None) or ())
    before, after = kwargs.pop("before_init", None), kwargs.pop("after_init", None)
    cls = build_algorithm(name, _module=module, **kwargs)
    if not (mixins or before or after):
        return cls
    built = cls

    def __init__(self: Algorithm, *args: Any, **kw: Any) -> None:
        if before is not None:
            before(self)
        built.__init__(self, *args, **kw)
        if after is not None:
            after(self)

    cls = type(name, (*mixins, built), {"__init__": __init__, "__module__": module})
    cls.__qualname__ = name
    setattr(sys.modules[module], name, cls)  # in place of the inner class bound there
    return cls


__all__ = ["build_trainer"]

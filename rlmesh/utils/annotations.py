"""RLlib's ``ray.rllib.utils.annotations``: the decorators its docs and user code put on
methods (``@override(Policy)``, ``@DeveloperAPI``, ...). They mark, and change nothing;
``override`` checks that the parent class has the method, as RLlib's does."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

F = TypeVar("F")


def override(parent: type) -> Callable[[F], F]:
    """``@override(Parent)``: the decorated method must exist on ``Parent`` (one line if not)."""
    def check(method: F) -> F:
        name = getattr(method, "__name__", None)
        if not isinstance(parent, type) or name is None or not hasattr(parent, name):
            raise NameError(f"@override({getattr(parent, '__name__', parent)}): "
                            f"{name!r} is not a method of it")
        return method

    return check


def _mark(obj: Any = None, **_: Any) -> Any:
    """A marker usable as ``@PublicAPI`` or ``@PublicAPI(stability="beta")``."""
    if obj is None or not callable(obj):
        return lambda inner: inner
    return obj


PublicAPI = DeveloperAPI = ExperimentalAPI = OldAPIStack = _mark
OverrideToImplementCustomLogic = OverrideToImplementCustomLogic_CallToSuperRecommended = _mark

__all__ = ["override", "PublicAPI", "DeveloperAPI", "ExperimentalAPI", "OldAPIStack",
           "OverrideToImplementCustomLogic", "OverrideToImplementCustomLogic_CallToSuperRecommended"]

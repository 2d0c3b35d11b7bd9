"""RLlib's ``build_torch_policy`` and ``build_policy_class`` at their old module paths:
``rlmesh.policy.policy_template.build_policy`` under RLlib's names (rlmesh's templates are
torch only)."""

from __future__ import annotations

from typing import Any, Callable

from rlmesh.policy.policy_template import _caller_module, build_policy
from rlmesh.policy.torch_policy import TorchPolicy


def build_torch_policy(name: str, *, loss_fn: Callable[..., Any] | None = None,
                       mixins: list[type] | None = None, **functions: Any) -> type[TorchPolicy]:
    """RLlib's torch policy template: ``build_policy(name, loss_fn, **functions)``, RLlib's
    keyword names and arities (``extra_grad_process_fn``, ``extra_action_out_fn``,
    ``optimizer_fn``, ``before_loss_init``, ``mixins``, ...). Assign the class to a
    module-level name: other processes import it by that name."""
    return build_policy(name, loss_fn, mixins=mixins, _module=_caller_module(), **functions)


def build_policy_class(name: str, framework: str = "torch", *,
                       loss_fn: Callable[..., Any] | None = None,
                       mixins: list[type] | None = None, **functions: Any) -> type[TorchPolicy]:
    """RLlib's ``build_policy_class(name, framework, ...)``: ``framework="torch"`` is
    ``build_policy``; TensorFlow is refused in one line."""
    if framework != "torch":
        raise ValueError(f"build_policy_class(framework={framework!r}): rlmesh builds torch "
                         "policies only: write framework='torch' (the same functions, torch "
                         "tensors in the loss)")
    return build_policy(name, loss_fn, mixins=mixins, _module=_caller_module(), **functions)


__all__ = ["build_policy_class", "build_torch_policy"]

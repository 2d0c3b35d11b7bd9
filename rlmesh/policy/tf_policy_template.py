"""RLlib's ``build_tf_policy``: refused in one line naming the torch spelling (rlmesh runs
torch only; the template's functions and keywords are the same)."""

from __future__ import annotations

from typing import Any


def build_tf_policy(name: str, *args: Any, **kwargs: Any) -> Any:
    """Refused: rlmesh has no TensorFlow. Write ``build_torch_policy`` (same keywords)."""
    raise NotImplementedError(
        f"build_tf_policy({name!r}): rlmesh has no TensorFlow; use "
        "rlmesh.policy.torch_policy_template.build_torch_policy with the same keywords, the "
        "loss written with torch (torch.mean for tf.reduce_mean)")


__all__ = ["build_tf_policy"]

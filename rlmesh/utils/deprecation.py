"""RLlib's ``ray.rllib.utils.deprecation``: ``DEPRECATED_VALUE`` and ``deprecation_warning``
for user code that marks its own old names (rlmesh's config says old keys itself)."""

from __future__ import annotations

import warnings

DEPRECATED_VALUE = -1


def deprecation_warning(old: str, new: str | None = None, *, help: str | None = None,
                        error: bool = False) -> None:
    """Warn (or with ``error``, raise ValueError) that ``old`` is deprecated for ``new``."""
    text = f"`{old}` is deprecated" + (f"; use `{new}` instead" if new else "") + \
        (f" ({help})" if help else "")
    if error:
        raise ValueError(text)
    warnings.warn(text, DeprecationWarning, stacklevel=2)


__all__ = ["DEPRECATED_VALUE", "deprecation_warning"]

"""Models by name (RLlib's ModelCatalog role): ``register_custom_model(name, cls)`` makes
``model={"custom_model": name}`` build ``cls``; ``build_model`` builds the default model or
a custom one. The model contract: docs/models.md. Importing this package needs no torch;
``build_model`` and the model classes load it on first use.
"""

from __future__ import annotations

from typing import Any

from rlmesh.rl.spec import CUSTOM_MODELS, MODEL_DEFAULTS

__all__ = ["MODEL_DEFAULTS", "register_custom_model", "build_model", "ActorCritic"]


def register_custom_model(name: str, model_class: Any) -> None:
    """Name a custom model: ``model={"custom_model": name}`` then builds ``model_class`` (a
    ``torch.nn.Module`` subclass, or its import path). Other processes import the class by
    its path, so it must be defined at module level (a script's classes are found by the
    script's file); register it before the algorithm is built."""
    if not isinstance(name, str) or not name or ":" in name:
        raise ValueError(f"a custom model's name is a non-empty string without ':', got {name!r}")
    if isinstance(model_class, str):
        if ":" not in model_class:
            raise ValueError(f"custom model {name!r}: {model_class!r} is not an import path "
                             "'package.module:ClassName'")
        CUSTOM_MODELS[name] = model_class
        return
    from rlmesh.runtime.import_path import path_of

    if not isinstance(model_class, type):
        raise ValueError(f"custom model {name!r}: {model_class!r} is not a class")
    CUSTOM_MODELS[name] = path_of(model_class, "custom model")


def __getattr__(name: str) -> Any:
    if name in ("build_model", "ActorCritic"):
        from rlmesh.rl import default_model as models

        return getattr(models, name)
    raise AttributeError(f"module 'rlmesh.models' has no attribute {name!r}")

"""rlmesh: distributed reinforcement learning without Ray."""

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # `import rlmesh` stays light (the CLI and slim clients import it); the RL surface
    # loads gymnasium and torch when first touched.
    if name == "register_env":
        from rlmesh.envs import register_env

        return register_env
    if name == "get_actor":
        from rlmesh.named_actors import get_actor

        return get_actor
    raise AttributeError(f"module 'rlmesh' has no attribute {name!r}")

"""rlmesh: distributed reinforcement learning without Ray."""

from typing import Any

__version__ = "0.1.0"

# name -> the module that defines it, imported when the name is first read.
_LAZY = {
    "register_env": "rlmesh.env.registry",
    "get_actor": "rlmesh.named_actors",
    # Ray's calls as RLlib scripts make them (rlmesh.init() is a no-op that says so).
    "init": "rlmesh.ray_compat",
    "shutdown": "rlmesh.ray_compat",
    "is_initialized": "rlmesh.ray_compat",
    "get": "rlmesh.ray_compat",
    "remote": "rlmesh.driver.remote_actors",  # @rlmesh.remote; Counter.remote() starts one
    "kill": "rlmesh.driver.remote_actors",
}


def __getattr__(name: str) -> Any:
    # `import rlmesh` stays light (the CLI and slim clients import it); the RL surface
    # loads gymnasium and torch when first touched.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rlmesh' has no attribute {name!r}")

"""Ray's ``ray.experimental.named_actors``: ``get_actor(name)`` and ``register_actor(name,
handle)`` over rlmesh.named_actors, where the actors themselves are started by the run's
``named_actors`` setting (docs/named_actors.md)."""

from rlmesh.named_actors import get_actor, register_actor

__all__ = ["get_actor", "register_actor"]

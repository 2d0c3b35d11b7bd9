"""Ray's ``ray.experimental.named_actors``: ``register_actor(name, handle)`` of a handle that
``Counter.remote()`` returned (rlmesh.driver.remote_actors: an actor process of the driver,
reached by every run built afterwards) or of a run's actor, and ``get_actor(name)``; over
rlmesh.named_actors (docs/named_actors.md)."""

from rlmesh.named_actors import get_actor, register_actor

__all__ = ["get_actor", "register_actor"]

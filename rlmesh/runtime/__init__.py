"""rlmesh.runtime: actors in processes, handles, supervision, named actors, diagnostics.

Knows nothing about RL: it could run any actor.
"""

from .actor import Actor
from .handle import ActorHandle, ActorUnavailable, RemoteError, StreamSender
from .job import Job, current_job, get_actor_sync
from .process import ActorStartError
from .supervisor import ActorEvent, RestartPolicy

__all__ = [
    "Actor", "ActorHandle", "ActorUnavailable", "RemoteError", "StreamSender",
    "Job", "current_job", "get_actor_sync", "ActorStartError", "ActorEvent", "RestartPolicy",
]

"""RLlib's ``ray.rllib.execution.common``: refused by name (see ``rlmesh.execution``)."""

from typing import NoReturn

from rlmesh.execution._refuse import refuse


def __getattr__(name: str) -> NoReturn:
    refuse(name, __name__)

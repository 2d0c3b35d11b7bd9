"""RLlib's older import path of the callbacks base class: ``from rlmesh.algorithms.callbacks
import DefaultCallbacks`` (``rlmesh.callbacks.Callbacks``; RLlib 2.40+ calls it
``RLlibCallback``, in ``rlmesh.callbacks.callbacks``)."""

from rlmesh.callbacks import Callbacks, DefaultCallbacks, Episode
from rlmesh.callbacks.callbacks import RLlibCallback

__all__ = ["DefaultCallbacks", "RLlibCallback", "Callbacks", "Episode"]

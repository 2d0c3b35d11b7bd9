"""RLlib 2.40+'s import path of the callbacks base class: ``from rlmesh.callbacks.callbacks
import RLlibCallback`` (the same class as ``rlmesh.callbacks.Callbacks``)."""

from rlmesh.callbacks import Callbacks, DefaultCallbacks, Episode

RLlibCallback = Callbacks

__all__ = ["RLlibCallback", "Callbacks", "DefaultCallbacks", "Episode"]

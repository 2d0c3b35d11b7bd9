"""Policies for the frame-count tests (test_frames_to_loss.py): each is its algorithm's own
policy, its loss recording the call stack it runs under (``inspect.stack``) into the file
named by ``RLMESH_TEST_STACK_FILE`` the first time it runs in a process, then computing the
loss as its base does. A learner process imports them by this path."""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path

from rlmesh.algorithms.dqn import DQNTorchPolicy
from rlmesh.algorithms.impala import ImpalaTorchPolicy
from rlmesh.algorithms.ppo import PPOTorchPolicy

STACK_FILE = "RLMESH_TEST_STACK_FILE"


def record_stack() -> None:
    """``[function, file name, file path, first line]`` of every frame, innermost (this
    loss) first, once."""
    path = Path(os.environ[STACK_FILE])
    if path.exists():
        return
    frames = [[f.function, Path(f.filename).name, f.filename, f.frame.f_code.co_firstlineno]
              for f in inspect.stack(context=0)[1:]]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(frames))
    tmp.replace(path)


class StackPPOPolicy(PPOTorchPolicy):
    def loss(self, mb):
        record_stack()
        return super().loss(mb)


class StackImpalaPolicy(ImpalaTorchPolicy):
    def loss(self, mb):
        record_stack()
        return super().loss(mb)


class StackDQNPolicy(DQNTorchPolicy):
    def loss(self, mb):
        record_stack()
        return super().loss(mb)

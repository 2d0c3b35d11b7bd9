"""Code that leaves a mark when it runs (importing this module writes the file named by
RLMESH_TEST_MARKER): tests assert that a checkpoint or a message cannot make a process run
code unasked."""

from __future__ import annotations

import os
from pathlib import Path

import gymnasium as gym

if os.environ.get("RLMESH_TEST_MARKER"):
    Path(os.environ["RLMESH_TEST_MARKER"]).write_text(f"imported by {os.getpid()}\n")


def make_env(env_config: dict) -> gym.Env:
    return gym.make("CartPole-v1")


def env_name(env: gym.Env) -> str:
    return type(env).__name__

"""Envs that take their runner process down or swell it, for the supervision tests: one that
kills its own process with a signal every K steps (a simulator's segfault), one that leaks
memory as it steps (importable by path, so runner processes build them; no torch here, so a
runner's memory is its own)."""

from __future__ import annotations

import os
import signal
import time

import numpy as np

from tests.integration import faulty_envs


class _Base(faulty_envs._Base):
    """The recovery tests' 2-observation, 20-step env, keeping its env_config."""

    def __init__(self, env_config=None) -> None:
        super().__init__(env_config)
        self.config = dict(env_config or {})


class CrashEnv(_Base):
    """Its process dies by ``env_config['signal']`` (default SIGSEGV) at its
    ``env_config['every']``-th step (default 50): a C extension's segfault, every time."""

    steps = 0  # in this process: a restarted runner counts from 0 again

    def step(self, action):
        CrashEnv.steps += 1
        if CrashEnv.steps >= int(self.config.get("every", 50)):
            os.kill(os.getpid(), getattr(signal, self.config.get("signal", "SIGSEGV")))
        return self._step()


class LeakEnv(_Base):
    """Keeps ``env_config['mb_per_step']`` MB (default 2) more at every step, which takes
    ``env_config['step_s']`` (default 0.01), up to ``env_config['max_mb']`` (default 400) in
    all: a simulator that never frees its frames (bounded, so a run without a memory limit
    cannot take the machine's)."""

    kept: list = []

    def step(self, action):
        time.sleep(float(self.config.get("step_s", 0.01)))
        mb = float(self.config.get("mb_per_step", 2))
        if len(LeakEnv.kept) * mb < float(self.config.get("max_mb", 400)):
            LeakEnv.kept.append(np.ones(int(mb * (1 << 20)), np.uint8))
        return self._step()


def make_crash(env_config):
    return CrashEnv(env_config)


def make_leak(env_config):
    return LeakEnv(env_config)


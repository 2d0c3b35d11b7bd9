"""The processes of the PPO benchmarks: each side in a session of its own, always stopped
with its descendants, and the two sampling sides served over stdin/stdout
(``python -m tests.benchmarks.ppo_sides rlmesh|raw WARMUP [FRAGMENT]``; ``SamplerPeer``
drives them).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from . import children
from .bench_runtime import NEW_SESSION, ROOT

ENV = "CartPole-v1"
TUNED = "cartpole-ppo.yaml"  # rlmesh/tuned_examples
NUM_RUNNERS, NUM_ENVS = 2, 8


# --- processes: started in their own session, always stopped with their descendants ---

def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}


def _note_descendants(pid: int, descendants: set[int]) -> None:
    """Add ``pid``'s descendants now alive to ``descendants`` (ray's daemons outlive a driver
    killed outright: only pids noted while it ran can find them afterwards)."""
    import psutil

    try:
        descendants.update(p.pid for p in psutil.Process(pid).children(recursive=True))
    except psutil.NoSuchProcess:
        pass


def _stop_tree(proc: subprocess.Popen, descendants: set[int], grace: float = 30) -> None:
    """Stop ``proc`` (SIGINT first: rlmesh train stops after its iteration, RLlib's peer
    shuts ray down), then any descendant seen earlier that outlived it."""
    if proc.poll() is None:
        _note_descendants(proc.pid, descendants)
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    _reap(descendants)


def _reap(descendants: set[int]) -> None:
    """Wait a little for each of ``descendants`` to exit; kill those that do not."""
    import psutil

    for pid in descendants:
        try:
            child = psutil.Process(pid)
            child.wait(5)  # lifelines: actors follow their driver out
        except psutil.NoSuchProcess:
            continue
        except psutil.TimeoutExpired:
            print(f"warning: pid {pid} outlived its driver; killing it", file=sys.stderr)
            child.kill()


@contextmanager
def started(cmd: list[str], **kwargs: Any) -> Iterator[tuple[subprocess.Popen, set[int]]]:
    """Popen ``cmd`` in a new session; yields it and a set to record descendants in."""
    proc = children.popen(cmd, cwd=ROOT, env=_env(), start_new_session=NEW_SESSION, **kwargs)
    descendants: set[int] = set()
    try:
        yield proc, descendants
    finally:
        _stop_tree(proc, descendants)


def run_timed(cmd: list[str], **kwargs: Any) -> tuple[int, str | None, float]:
    """Run ``cmd`` to its end under ``started``: (exit code, its stdout when piped, wall
    seconds from start to exit)."""
    t0 = time.perf_counter()
    with started(cmd, **kwargs) as (proc, _):
        out, _ = proc.communicate()
    return proc.returncode, out, time.perf_counter() - t0


def peer_json(cmd: list[str]) -> tuple[dict[str, Any], float]:
    """A peer script's last stdout line as JSON, and its wall seconds; a failed run raises."""
    code, out, wall = run_timed(cmd, stdout=subprocess.PIPE, text=True)
    if code != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {code}")
    return json.loads(out.strip().splitlines()[-1]), wall


class SamplerPeer:
    """A sampling side in its own process: ``run(n)`` -> (env steps, seconds). ``cmd`` runs
    the side (default: this module with rlmesh's python); ``args`` follow it."""

    def __init__(self, *args: str, cmd: list[str] | None = None) -> None:
        cmd = cmd or [sys.executable, "-m", __name__]
        self.proc = subprocess.Popen([*cmd, *args], cwd=ROOT,
                                     env=_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, start_new_session=NEW_SESSION)
        self.descendants: set[int] = set()
        ready = self.proc.stdout.readline().split()  # type: ignore[union-attr]
        if not ready or ready[0] != "ready":
            self.close()
            raise RuntimeError(f"sampler {args} did not start (exit code {self.proc.returncode})")
        self.info = ready[1:]
        _note_descendants(self.proc.pid, self.descendants)

    def run(self, steps: int) -> tuple[int, float]:
        self.proc.stdin.write(f"{steps}\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        done, secs = self.proc.stdout.readline().split()  # type: ignore[union-attr]
        return int(done), float(secs)

    def close(self) -> None:
        _note_descendants(self.proc.pid, self.descendants)
        if self.proc.stdin:
            self.proc.stdin.close()  # EOF: the side stops its algorithm (and ray) and exits
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        if self.proc.stdout:
            self.proc.stdout.close()
        _reap(self.descendants)


def _serve(run: Callable[[int], tuple[int, float]], warmup: int, info: str) -> None:
    run(warmup)
    print("ready", info, flush=True)
    for line in sys.stdin:
        steps, secs = run(int(line))
        print(steps, secs, flush=True)


# RLlib's PPO train batch: "auto" fragments are 4000 / 16 envs = 250 steps on both sides
# (rlmesh's own default batch is 2048 since the defaults were measured, issue 16).
RLLIB_TRAIN_BATCH = 4000


def _tuned_model() -> dict[str, Any]:
    from rlmesh.tuned_examples import load_experiment

    return load_experiment(TUNED)[1]["config"]["model"]


def serve_rlmesh(warmup: int, fragment: str) -> None:
    """PPO's env runners, learning off: ``mesh.runners.sample(n)`` as ``train()`` calls it."""
    from rlmesh.algorithms.ppo_config import PPOConfig

    length = fragment if fragment == "auto" else int(fragment)
    config = (PPOConfig().environment(ENV)
              .env_runners(num_env_runners=NUM_RUNNERS, num_envs_per_env_runner=NUM_ENVS,
                           rollout_fragment_length=length)
              .training(model=_tuned_model(), train_batch_size=RLLIB_TRAIN_BATCH))
    algo = config.build()
    try:
        def run(steps: int) -> tuple[int, float]:
            t0 = time.perf_counter()
            fragments = algo.mesh.runners.sample(steps)
            return sum(f["env_steps"] for f in fragments), time.perf_counter() - t0

        _serve(run, warmup, str(config.get_rollout_fragment_length(1)))
    finally:
        algo.stop()


def serve_raw(warmup: int) -> None:
    """One process: a SyncVectorEnv of 8 and one batched forward pass of the same MLP per step."""
    import gymnasium as gym
    import numpy as np
    import torch

    torch.set_num_threads(1)
    model = _tuned_model()
    assert model["fcnet_activation"] == "tanh", model
    layers: list[torch.nn.Module] = []
    width = 4  # CartPole's observation
    for hidden in model["fcnet_hiddens"]:
        layers += [torch.nn.Linear(width, hidden), torch.nn.Tanh()]
        width = hidden
    policy = torch.nn.Sequential(*layers, torch.nn.Linear(width, 2))
    # SAME_STEP: every step is a real env step, reset inside it, as rlmesh's runners count.
    envs = gym.vector.SyncVectorEnv([lambda: gym.make(ENV) for _ in range(NUM_ENVS)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    obs = envs.reset(seed=0)[0]

    def run(steps: int) -> tuple[int, float]:
        nonlocal obs
        n = -(-steps // NUM_ENVS)
        t0 = time.perf_counter()
        for _ in range(n):
            with torch.no_grad():
                dist = torch.distributions.Categorical(logits=policy(torch.as_tensor(obs)))
                actions = dist.sample()
                dist.log_prob(actions)  # PPO keeps it; rlmesh's runners compute it too
            obs = envs.step(actions.numpy().astype(np.int64))[0]
        return n * NUM_ENVS, time.perf_counter() - t0

    _serve(run, warmup, "-")

if __name__ == "__main__":
    role, *args = sys.argv[1:]
    try:
        {"rlmesh": serve_rlmesh, "raw": serve_raw}[role](int(args[0]), *args[1:])
    except KeyboardInterrupt:
        pass

"""The processes of the IMPALA benchmarks: the synthetic fragment producer (an actor), and
sides run as commands, ``python -m tests.benchmarks.impala_actors raw WARMUP`` (one
process stepping 8 CartPoles with the numpy policy, served over stdin/stdout as
``ppo_sides.SamplerPeer`` expects), ``... sampler WARMUP`` (the runners' ``EnvSampler``
alone, served the same way) and ``... impala ITERATIONS`` (a real IMPALA run).

Producers import neither torch nor gymnasium: 64 of them share 2 cores here.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

import numpy as np

from rlmesh.runtime import Actor

TUNED = "cartpole-impala.yaml"  # rlmesh/tuned_examples
ENV = "CartPole-v1"
NUM_ENVS = 8
FRAGMENT_ROWS = 50  # the tuned example's rollout_fragment_length
REPORTING_S = 2.0  # min_time_s_per_reporting of the throughput runs


def tuned_config(**overrides: Any) -> dict[str, Any]:
    """The tuned example's config (with its env) as ``ImpalaConfig.from_dict`` takes it."""
    from rlmesh.tuned_examples import load_experiment

    _, exp, _ = load_experiment(TUNED)
    return {**exp["config"], "env": exp["env"], **overrides}


def cartpole_fragment(rows: int = FRAGMENT_ROWS, envs: int = NUM_ENVS, seed: int = 0,
                      worker_index: int = 1) -> dict[str, Any]:
    """A fragment as an EnvRunner ships it while streaming (``EnvSampler.sample`` with
    ``policy_version`` and ``worker_index``, its ``episodes`` popped): CartPole's shapes and
    dtypes, plausible contents (episodes of about 22 steps, as an untrained policy's)."""
    rng = np.random.default_rng(seed)
    inputs = rng.normal(0.0, 0.1, (rows, envs, 2)).astype(np.float32)
    actions = rng.integers(0, 2, (rows, envs)).astype(np.int64)
    log_softmax = inputs - np.logaddexp(inputs[..., 0], inputs[..., 1])[..., None]
    logp = np.take_along_axis(log_softmax, actions[..., None], -1)[..., 0].astype(np.float32)
    return {
        "obs": rng.normal(0.0, 0.5, (rows, envs, 4)).astype(np.float32),
        "actions": actions, "action_logp": logp, "action_dist_inputs": inputs,
        "rewards": np.ones((rows, envs), np.float32),
        "terminateds": rng.random((rows, envs)) < 1 / 22,
        "truncateds": np.zeros((rows, envs), bool),
        "mask": np.ones((rows, envs), bool),
        "next_obs": rng.normal(0.0, 0.5, (envs, 4)).astype(np.float32),
        "trunc_index": np.zeros((0, 2), np.int64),
        "trunc_obs": np.zeros((0, 4), np.float32),
        "env_steps": rows * envs, "policy_version": 0, "worker_index": worker_index,
    }


def fragment_bytes(fragment: dict[str, Any]) -> int:
    """The bytes of a fragment's arrays (what crosses the wire, headers aside)."""
    return sum(v.nbytes for v in fragment.values() if isinstance(v, np.ndarray))


class Producer(Actor):
    """A stand-in for an env runner that costs nothing to sample: it streams one
    pre-built fragment to its sink's ``add_fragment`` as fast as the stream's credits allow."""

    def __init__(self, index: int) -> None:
        self.fragment = cartpole_fragment(seed=index, worker_index=index + 1)
        self.sent = 0
        self._task: asyncio.Task[None] | None = None
        self._sender: Any = None

    async def stream_to(self, sink: str | None, window: int = 2) -> None:
        """Stream to the actor named ``sink`` from now on (None: stop streaming)."""
        await self._halt()
        if sink is not None:
            handle = await self.job.get_actor(sink, timeout=30)
            self._sender = handle.stream("add_fragment", window)
            self._task = asyncio.ensure_future(self._stream(self._sender))

    async def _stream(self, sender: Any) -> None:
        while True:
            await sender.send(self.fragment)
            self.sent += 1

    async def _halt(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            except Exception as exc:  # the sink refused a fragment: a figure would be wrong
                raise RuntimeError(f"producer stream failed: {exc}") from exc
            self._task = None
        if self._sender is not None:
            self._sender.close()
            self._sender = None

    def num_sent(self) -> int:
        return self.sent

    def pid(self) -> int:
        return os.getpid()

    async def on_stop(self) -> None:
        if self._task is not None:
            self._task.cancel()


# --- the sides run as commands ---

def serve_raw(warmup: int) -> None:
    """One process: a SyncVectorEnv of 8 CartPoles and one batched call per step of the numpy
    policy the runners use (``NumpyPolicy``, the tuned example's [64, 64] tanh network)."""
    import gymnasium as gym

    from rlmesh.rl.numpy_policy import NumpyPolicy

    from .ppo_sides import _serve

    envs = gym.vector.SyncVectorEnv([lambda: gym.make(ENV) for _ in range(NUM_ENVS)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    policy = NumpyPolicy(envs.single_observation_space, envs.single_action_space,
                         tuned_config()["model"], seed=0)
    obs = envs.reset(seed=0)[0]

    def run(steps: int) -> tuple[int, float]:
        nonlocal obs
        n = -(-steps // NUM_ENVS)
        t0 = time.perf_counter()
        for _ in range(n):
            actions, _, _ = policy(obs, True)  # logp and dist inputs computed, as runners do
            obs = envs.step(actions)[0]
        return n * NUM_ENVS, time.perf_counter() - t0

    _serve(run, warmup, "-")


def serve_sampler(warmup: int) -> None:
    """One process: the runners' own sampling loop (``EnvSampler``, fragments of
    ``FRAGMENT_ROWS`` rows) over 8 CartPoles with the same policy, and nothing of the mesh
    around it: what a runner's steps cost before shipping, weights and the learner."""
    import gymnasium as gym

    from rlmesh.algorithms.impala_config import ImpalaConfig
    from rlmesh.policy.numpy_mlp import NumpyMLPPolicy
    from rlmesh.roles.env_sampler import EnvSampler

    from .ppo_sides import _serve

    space_env = gym.make(ENV)
    # What a runner acts with: the policy contract around the numpy fast path.
    policy = NumpyMLPPolicy(space_env.observation_space, space_env.action_space,
                            ImpalaConfig.from_dict(tuned_config()))
    policy.seed(0)
    sampler = EnvSampler(lambda i: gym.make(ENV), NUM_ENVS, policy, seeds=list(range(NUM_ENVS)))

    def run(steps: int) -> tuple[int, float]:
        done = 0
        t0 = time.perf_counter()
        while done < steps:
            done += sampler.sample(FRAGMENT_ROWS)["env_steps"]
        return done, time.perf_counter() - t0

    _serve(run, warmup, "-")


def run_impala(iterations: int) -> None:
    """The tuned example learning (2 runners x 8 envs, no aggregator, one learner, one pass
    per batch), with
    ``REPORTING_S`` per iteration; prints one JSON line: a record per ``train()`` call."""
    import psutil

    from rlmesh.algorithms.impala_config import ImpalaConfig

    me = psutil.Process()

    def cpu_s() -> dict[str, float]:
        """CPU seconds so far of this driver and of the processes it started, by role (with
        num_learners 0, the tuned example's, the learner runs in the driver process)."""
        used = {"driver": sum(me.cpu_times()[:2]), "runners": 0.0, "learner": 0.0}
        for p in me.children(recursive=True):
            try:
                args = " ".join(p.cmdline())
                role = ("runners" if ".env_runner-" in args else
                        "learner" if ".learner-" in args else "driver")
                used[role] += sum(p.cpu_times()[:2])
            except psutil.NoSuchProcess:
                pass
        return used

    started = time.perf_counter()
    # One pass per batch, RLlib's default (the tuned example's second pass is for sample
    # efficiency, and makes the learner, not the runners, set the pace).
    config = ImpalaConfig.from_dict(tuned_config(min_time_s_per_reporting=REPORTING_S,
                                                 num_sgd_iter=1, minibatch_buffer_size=1))
    algo = config.build()
    out: dict[str, Any] = {"build_s": time.perf_counter() - started, "iterations": []}
    try:
        for _ in range(iterations):
            r = algo.train()
            out["iterations"].append({
                "t": time.perf_counter(), "cpu_s": cpu_s(), "timesteps_total": r["timesteps_total"],
                "num_env_steps_trained": r["num_env_steps_trained"],
                "updates": r["num_learner_updates"], "policy_lag_mean": r["policy_lag_mean"],
                "policy_lag_max": r["policy_lag_max"],
                "learner_idle_fraction": r["learner_idle_fraction"],
                "episode_reward_mean": r["episode_reward_mean"],
                "num_fragments_lost": r["num_fragments_lost"]})
    finally:
        algo.stop()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    role, *args = sys.argv[1:]
    try:
        {"raw": serve_raw, "sampler": serve_sampler, "impala": run_impala}[role](int(args[0]))
    except KeyboardInterrupt:
        pass

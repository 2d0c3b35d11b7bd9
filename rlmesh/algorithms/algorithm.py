"""The driver of a training run: ``Algorithm`` with RLlib's train/save/restore/compute API.

It owns the mesh (a Job with a param server, env runners and the learner group), runs the
mesh's event loop on a thread of its own, and keeps the user's thread for the learner's
computation, so heartbeats and weight fetches are served during an update.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Awaitable, Callable, TypeVar

import numpy as np
import torch

from rlmesh.algorithms import checkpoints
from rlmesh.algorithms.config import AlgorithmConfig
from rlmesh.algorithms.topology import Mesh
from rlmesh.callbacks import load_callbacks, summarize_custom_metrics
from rlmesh.algorithms.inference import InferencePolicy
from rlmesh.envs import as_space, env_registry, spaces_of
from rlmesh.envs import import_object
from rlmesh.roles.learner import LearnerGroup, load_weights, merge_fragments

log = logging.getLogger(__name__)
T = TypeVar("T")
SMOOTHING_EPISODES = 100  # RLlib's metrics_num_episodes_for_smoothing


class LoopThread:
    """An event loop on a daemon thread; ``run(coro)`` waits for its result."""

    def __init__(self) -> None:
        import uvloop

        self.loop = uvloop.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="rlmesh.driver-loop",
                                       daemon=True)
        self.thread.start()

    def run(self, coro: Awaitable[T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)  # type: ignore[arg-type]

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class Algorithm:
    """Base of every algorithm: subclasses name their config class and learner hooks."""

    config_class: type[AlgorithmConfig] = AlgorithmConfig
    learner_hooks: Any = None
    mesh_class: type[Mesh] = Mesh

    def __init__(self, config: AlgorithmConfig | dict[str, Any]) -> None:
        if isinstance(config, dict):
            config = self.config_class.from_dict(config)
        config.validate()
        self.config = config
        logging.getLogger("rlmesh").setLevel(config.log_level)
        if config.seed is not None:
            torch.manual_seed(config.seed)
        self.iteration = 0
        self.timesteps_total = 0
        self.episodes_total = 0
        self.num_env_steps_trained = 0  # what the learner consumed, apart from what was sampled
        self.time_total_s = 0.0
        self._episodes: deque[dict[str, Any]] = deque(maxlen=SMOOTHING_EPISODES)
        self.obs_space, self.action_space = self._spaces(config)
        self.last_checkpoint: str | None = None
        self._loop = LoopThread()
        self.mesh = self.mesh_class(config, self._loop)
        # The runner processes start (imports, envs) while this thread builds the learner.
        runners = asyncio.run_coroutine_threadsafe(self.mesh.start_runners(), self._loop.loop)
        try:
            self.learner_group = self._make_learner_group()
            self._policy = InferencePolicy(config, self.obs_space, self.action_space)
            self.callbacks = load_callbacks(config.callbacks_class)
            runners.result()
            self._loop.run(self._start_learners())
            self._publish()
            self._on_started()
        except BaseException:
            try:  # let a spawn in progress finish before the job shuts down
                runners.result(60)
            except BaseException:
                pass
            self.stop()
            raise

    def _make_learner_group(self) -> Any:
        return LearnerGroup(self.config, self.obs_space, self.action_space, self.learner_hooks)

    async def _start_learners(self) -> None:
        await self.learner_group.start_remote(self.mesh.job)

    def _on_started(self) -> None:
        """Called once every process is up and the first weights are published."""

    @staticmethod
    def _spaces(config: AlgorithmConfig) -> tuple[Any, Any]:
        """The spaces the config gives, else those of one env built here."""
        if config.observation_space is not None and config.action_space is not None:
            return as_space(config.observation_space), as_space(config.action_space)
        if config.env is None:
            raise ValueError("no env: set .environment('CartPole-v1') (a gymnasium id or "
                             "'pkg.module:make_env'), or, for external simulators, "
                             "policy_server_address with observation_space and action_space")
        return spaces_of(config.to_dict()["env"], config.env_config, env_registry())

    # --- training ---

    def train(self) -> dict[str, Any]:
        """One iteration: sample ``train_batch_size`` env steps, update, publish weights."""
        start = time.perf_counter()
        fragments = self._loop.run(self.mesh.sample(self.config.train_batch_size))
        sample_time = time.perf_counter() - start
        steps = sum(f["env_steps"] for f in fragments)
        self.timesteps_total += steps
        learn_start = time.perf_counter()
        stats: dict[str, float] = {}
        if steps:  # none: policy-server clients sent nothing in time (an idle iteration)
            stats = self.learner_group_update(fragments)
            self.num_env_steps_trained += int(stats.get("num_env_steps_trained", 0))
        learn_time = time.perf_counter() - learn_start
        if steps:
            self._publish()
        self.iteration += 1
        elapsed = time.perf_counter() - start
        self.time_total_s += elapsed
        result = self._result(fragments, steps, stats, elapsed, sample_time, learn_time)
        if self.callbacks is not None:
            self.callbacks.on_train_result(algorithm=self, result=result)
        return result

    def learner_group_update(self, fragments: list[dict[str, Any]]) -> dict[str, float]:
        batch = merge_fragments(fragments)
        group = self.learner_group
        if group.local is not None:
            return group.local.update_from_batch(batch, self.timesteps_total)
        return self._loop.run(group.remote.update(batch, self.timesteps_total, timeout=None))

    def _publish(self) -> None:
        weights = self.get_weights()
        load_weights(self._policy.model, weights)
        self._loop.run(self.mesh.publish(weights))

    def _result(self, fragments: list[dict[str, Any]], steps: int, stats: dict[str, float],
                elapsed: float, sample_time: float, learn_time: float) -> dict[str, Any]:
        new = [e for f in fragments for e in f["episodes"]]
        self._episodes.extend(new)
        self.episodes_total += len(new)
        returns = [e["return"] for e in self._episodes]
        lengths = [e["length"] for e in self._episodes]
        nan = float("nan")
        return {
            "episode_reward_mean": float(np.mean(returns)) if returns else nan,
            "episode_reward_min": float(np.min(returns)) if returns else nan,
            "episode_reward_max": float(np.max(returns)) if returns else nan,
            "episode_len_mean": float(np.mean(lengths)) if lengths else nan,
            "episodes_this_iter": len(new),
            "episodes_total": self.episodes_total,
            "timesteps_total": self.timesteps_total,
            "num_env_steps_sampled": self.timesteps_total,
            "num_env_steps_trained": self.num_env_steps_trained,
            "num_env_steps_sampled_this_iter": steps,
            "idle_iteration": steps == 0,
            "num_env_steps_sampled_throughput_per_sec": steps / sample_time if sample_time else nan,
            "time_this_iter_s": elapsed,
            "time_total_s": self.time_total_s,
            "timers": {"sample_time_s": sample_time, "learn_time_s": learn_time},
            "training_iteration": self.iteration,
            "num_healthy_env_runners": self.mesh.num_healthy_runners(),
            "num_env_runner_restarts": self.mesh.restarts,
            "custom_metrics": summarize_custom_metrics([e.get("custom_metrics", {}) for e in new]),
            "info": {"learner": {"default_policy": stats}},
        }

    # --- policy access ---

    def get_weights(self) -> dict[str, np.ndarray]:
        group = self.learner_group
        if group.local is not None:
            return group.local.get_weights()
        return self._loop.run(group.remote.get_weights())

    def set_weights(self, weights: dict[str, Any]) -> None:
        group = self.learner_group
        if group.local is not None:
            group.local.set_weights(weights)
        else:
            self._loop.run(group.remote.set_weights(weights))
        self._publish()

    def get_policy(self) -> "Policy":
        return Policy(self)

    def compute_single_action(self, observation: Any, explore: bool = False) -> Any:
        """The action for one observation, from the newest weights (driver-side copy)."""
        return self._policy.compute_single_action(observation, explore)

    @property
    def env_runners(self) -> "EnvRunnerGroup":
        return EnvRunnerGroup(self)

    # --- checkpoints ---

    def save(self, checkpoint_dir: str | Path | None = None) -> str:
        """Write a checkpoint (atomically) and return its directory."""
        if checkpoint_dir is None:
            checkpoint_dir = Path.home() / "rlmesh_results" / "checkpoints" / (
                f"{type(self).__name__}_{time.strftime('%Y-%m-%d_%H-%M-%S')}"
                f"/checkpoint_{self.iteration:06d}")
        state = (self.learner_group.local.get_state() if self.learner_group.local is not None
                 else self._loop.run(self.learner_group.remote.get_state()))
        self.last_checkpoint = checkpoints.write(Path(checkpoint_dir), self, state)
        return self.last_checkpoint

    def restore(self, path: str | Path) -> None:
        meta, state = checkpoints.read(Path(path))
        group = self.learner_group
        if group.local is not None:
            group.local.set_state(state)
        else:
            self._loop.run(group.remote.set_state(state))
        counters = meta["counters"]
        self.iteration = counters["training_iteration"]
        self.timesteps_total = counters["timesteps_total"]
        self.episodes_total = counters["episodes_total"]
        self.num_env_steps_trained = counters.get("num_env_steps_trained", 0)
        self.time_total_s = counters["time_total_s"]
        self._publish()

    @classmethod
    def from_checkpoint(cls, path: str | Path) -> "Algorithm":
        meta, _ = checkpoints.read(Path(path))
        algo_cls = import_object(meta["algorithm"]) if cls is Algorithm else cls
        algo = algo_cls(algo_cls.config_class.from_dict(meta["config"]))
        algo.restore(path)
        return algo

    # --- lifecycle ---

    def stop(self) -> None:
        """Stop every process of the run; the algorithm cannot train afterwards."""
        loop = getattr(self, "_loop", None)
        if loop is None:
            return
        try:
            loop.run(self.mesh.stop(), timeout=30)
        finally:
            loop.close()
            self._loop = None  # type: ignore[assignment]

    def __enter__(self) -> "Algorithm":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class Policy:
    """RLlib's policy view: weights in and out, single actions."""

    def __init__(self, algo: Algorithm) -> None:
        self._algo = algo

    def get_weights(self) -> dict[str, np.ndarray]:
        return self._algo.get_weights()

    def set_weights(self, weights: dict[str, Any]) -> None:
        self._algo.set_weights(weights)

    def compute_single_action(self, obs: Any, explore: bool = False) -> Any:
        return self._algo.compute_single_action(obs, explore)


class EnvRunnerGroup:
    """Reach every env runner, or every env of every runner (RLlib's foreach_* API).

    Functions cannot cross processes (nothing is pickled): pass a method name, or a
    module-level function, which is sent by its import path.
    """

    def __init__(self, algo: Algorithm) -> None:
        self._algo = algo

    def foreach_env_runner(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        return self._algo._loop.run(self._algo.mesh.foreach_runner(method, *args, **kwargs))

    def foreach_env(self, fn: str | Callable[..., Any], *args: Any) -> list[Any]:
        """``fn(env, *args)`` on every env: ``fn`` a module-level function or the name of a
        method of the env (``"set_phase"`` calls ``env.unwrapped.set_phase(*args)``)."""
        if callable(fn):
            if "<" in fn.__qualname__:
                raise ValueError("foreach_env needs a module-level function or a method name: "
                                 "a lambda or nested function cannot be sent to other processes")
            path = f"{fn.__module__}:{fn.__qualname__}"
            per_runner = self.foreach_env_runner("foreach_env", path, *args)
        else:
            per_runner = self.foreach_env_runner("call_env_method", fn, *args)
        return [r for runner in per_runner for r in runner]

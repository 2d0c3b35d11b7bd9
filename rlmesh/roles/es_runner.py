"""The ES runner (evolution strategies, ARS): evaluates perturbations of the current policy
and sends back only what the driver needs to step it, a few bytes per episode: the noise
index of each mirrored pair, its two returns and lengths, and the returns of the occasional
unperturbed evaluation episode.

``Evaluator`` is the logic (one env, the shared noise table, no sockets); ``ESRunner`` is the
actor around it: config, weights from the param server, observation filter statistics.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from rlmesh.env.registry import EnvContext, actions_for_env, make_env
from rlmesh.rl.columns import DEFAULT_POLICY_ID
from rlmesh.rl.filters import make_filter
from rlmesh.rl.noise_table import NoiseTable
from rlmesh.roles.specs import RunnerSpec
from rlmesh.roles.env_sampler import SEED_STRIDE
from rlmesh.roles.obs_filters import ObsFilterCalls
from rlmesh.roles.runner_policy import VersionedPolicies, make_runner_policies
from rlmesh.runtime import Actor
from rlmesh.runtime.protocol import Protocol

if TYPE_CHECKING:
    from rlmesh.config.base import AlgorithmConfig

log = logging.getLogger(__name__)


class Evaluator:
    """Episodes of one env with a flat-parameter policy (``ESPolicy``) at ``theta``,
    ``theta + s * noise`` or ``theta - s * noise``."""

    def __init__(self, env: gym.Env, policy: Any, noise: NoiseTable, obs_filter: Any,
                 config: AlgorithmConfig, seed: int | None) -> None:
        self.env, self.policy, self.noise, self.obs_filter = env, policy, noise, obs_filter
        self.config = config
        self.rng = np.random.default_rng(seed)
        self.box = isinstance(env.action_space, gym.spaces.Box)
        self.offset = float(getattr(config, "offset", 0.0))

    def episode(self, theta: np.ndarray, noisy: bool, env_seed: int) -> tuple[float, float, int]:
        """``(return, training return, length)`` of one episode at ``theta`` from the env
        reset with ``env_seed``. A noisy episode (a perturbation) adds to the filter
        statistics and gets ``action_noise_std``; its training return has ``offset`` taken
        off each step's reward (ARS)."""
        cfg, policy = self.config, self.policy
        policy.set_flat(theta)
        obs, _ = self.env.reset(seed=env_seed)
        total, length = 0.0, 0
        action_noise = cfg.action_noise_std if (noisy and self.box) else 0.0
        while True:
            x = self.obs_filter(np.asarray(obs)[None], update=noisy)
            action = policy.compute_actions(x)[0][0]
            if action_noise:
                action = action + self.rng.normal(0.0, action_noise, np.shape(action))
            action = actions_for_env(action, self.env.action_space, cfg.normalize_actions,
                                     cfg.clip_actions)
            obs, reward, terminated, truncated, _ = self.env.step(
                action if self.box else int(action))
            total += float(reward)
            length += 1
            if terminated or truncated:
                return total, total - self.offset * length, length

    async def rollouts(self, theta: np.ndarray, min_pairs: int, min_steps: int) -> dict[str, Any]:
        """Mirrored pairs until ``min_pairs`` pairs and ``min_steps`` env steps (at least one
        pair); each episode is instead, with probability ``eval_prob``, an evaluation of
        ``theta`` itself. The two episodes of a pair start from the same initial state
        (common random numbers: their return difference is the perturbation's doing, not
        the start's). The event loop runs between episodes (a call may take seconds)."""
        cfg = self.config
        indices, returns, lengths, eval_returns, eval_lengths = [], [], [], [], []
        steps = 0
        while len(indices) < max(1, min_pairs) or steps < min_steps:
            await asyncio.sleep(0)
            env_seed = int(self.rng.integers(2 ** 31))
            if self.rng.random() < cfg.eval_prob:
                ret, _, n = self.episode(theta, noisy=False, env_seed=env_seed)
                eval_returns.append(ret)
                eval_lengths.append(n)
                steps += n
                continue
            index = self.noise.sample_index(self.rng, theta.size)
            eps = cfg.noise_stdev * self.noise.get(index, theta.size)
            _, pos, n_pos = self.episode(theta + eps, noisy=True, env_seed=env_seed)
            _, neg, n_neg = self.episode(theta - eps, noisy=True, env_seed=env_seed)
            indices.append(index)
            returns.append((pos, neg))
            lengths.append((n_pos, n_neg))
            steps += n_pos + n_neg
        self.policy.set_flat(theta)
        return {"noise_indices": np.array(indices, np.int64),
                "returns": np.array(returns, np.float32).reshape(-1, 2),
                "lengths": np.array(lengths, np.int32).reshape(-1, 2),
                "eval_returns": np.array(eval_returns, np.float32),
                "eval_lengths": np.array(eval_lengths, np.int32), "env_steps": steps}


class ESRunner(ObsFilterCalls, VersionedPolicies, Actor):
    """Evaluates perturbations when the driver calls ``do_rollouts``; weights are pushed by
    the actor named ``param_server`` (taken at each call), the noise table from the node's file."""

    protocol = Protocol(
        calls=("do_rollouts", "set_weights", "take_weights", "get_weights", "get_filter_updates",
               "set_filter_state", "get_filter_state", "metrics"),
        test_hooks=("pid",),
    )

    def __init__(self, spec: dict[str, Any]) -> None:
        own = RunnerSpec.from_data(spec)
        cfg, specs, registry = own.settings(), own.policy_specs, own.env_registry
        worker_index, param_server = own.worker_index, own.param_server
        self.config, self.worker_index = cfg, worker_index
        env = make_env(cfg.env, EnvContext(cfg.env_config, worker_index, 0, cfg.num_env_runners),
                       registry, model=cfg.model, preprocessor_pref=cfg.preprocessor_pref)
        self.policies = make_runner_policies(specs, cfg, None, own_process=False)
        self.versions = {pid: -1 for pid in self.policies}
        self.obs_filter = make_filter(cfg.observation_filter, env.observation_space)
        seed = None if cfg.seed is None else cfg.seed + SEED_STRIDE * worker_index
        self.evaluator = Evaluator(env, self.policy, NoiseTable.shared(cfg.noise_size),
                                   self.obs_filter, cfg, seed)
        self._ps_name, self._ps = param_server, None
        self._inbox: dict[str, Any] = {}
        self._stats = {"num_weight_updates": 0, "num_calls": 0, "sample_time_s": 0.0,
                       "num_env_steps_sampled": 0, "num_weight_pushes": 0, "num_weight_pulls": 0}

    async def do_rollouts(self, min_pairs: int, min_steps: int) -> dict[str, Any]:
        """Mirrored pairs around the newest published weights (see ``Evaluator.rollouts``),
        stamped with their ``policy_version`` and this ``worker_index``."""
        await self._refresh_weights()
        start = time.perf_counter()
        policy = self.policies[DEFAULT_POLICY_ID]
        out = await self.evaluator.rollouts(policy.get_flat(), min_pairs, min_steps)
        self._stats["sample_time_s"] += time.perf_counter() - start
        self._stats["num_calls"] += 1
        self._stats["num_env_steps_sampled"] += out["env_steps"]
        return {**out, "policy_version": self.version, "worker_index": self.worker_index}

    def metrics(self) -> dict[str, Any]:
        return {**self._stats, "worker_index": self.worker_index, "policy_version": self.version}

    def pid(self) -> int:
        """This runner's process id (tests kill it to exercise restarts)."""
        return os.getpid()

    async def on_stop(self) -> None:
        try:
            self.evaluator.env.close()
        except Exception:
            log.warning("env raised in close()", exc_info=True)

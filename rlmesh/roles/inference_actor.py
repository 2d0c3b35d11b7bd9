"""Central inference (SEED RL, Sample Factory's policy worker): runners send observations,
this actor batches every request waiting into one forward pass on its device (the learner's
GPU where there is one) and answers each with its actions. Weights come from the param
server as a runner's do; a request names the version its runner holds, and none is
answered with older weights."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

import numpy as np

from rlmesh.policy.policy_spec import build_policy_from_data
from rlmesh.rl.columns import DEFAULT_POLICY_ID
from rlmesh.roles.specs import RunnerSpec
from rlmesh.roles.runner_policy import VersionedPolicies, call_actions
from rlmesh.runtime import Actor
from rlmesh.runtime.protocol import Protocol

log = logging.getLogger(__name__)

#: The actor's name in the job: runners find it by this name, also after a restart.
INFERENCE_ACTOR = "inference"


def inference_device(requested: str = "auto") -> str:
    """"cuda" when asked or when one is visible ("auto"), else "cpu"."""
    if requested != "auto":
        return requested
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class InferenceActor(VersionedPolicies, Actor):
    """Batched ``compute_actions`` for every runner of a run (``inference_mode="central"``).

    Requests arriving while a forward pass runs wait in ``_queue``; the next pass takes
    them all, so the batch grows with the number of runners waiting (their double buffers
    keep one half stepping meanwhile)."""

    protocol = Protocol(calls=("compute_actions", "take_weights", "metrics"), test_hooks=("pid",))

    def __init__(self, spec: dict[str, Any], device: str = "auto") -> None:
        run = RunnerSpec.from_data(spec)
        cfg, specs, param_server = run.settings(), run.policy_specs, run.param_server
        self.config = cfg
        self.device = inference_device(device)
        if self.device == "cpu":
            import torch

            torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
        spec = (specs or {}).get(DEFAULT_POLICY_ID) or next(iter((specs or {}).values()), None)
        if spec is None:
            raise ValueError("central inference needs the run's policy specs (RunnerSpec.policy_specs)")
        # The learner's class: a torch policy that runs on the device (a runner class may
        # be the numpy fast path, which has no device).
        self.policies = {DEFAULT_POLICY_ID: build_policy_from_data(spec, cfg, runner=False,
                                                                   device=self.device)}
        self.versions = {DEFAULT_POLICY_ID: -1}
        self._ps_name = param_server
        self._ps: Any = None
        self._inbox: dict[str, Any] = {}
        self._queue: list[tuple[np.ndarray, bool | None, asyncio.Future]] = []
        self._flushing = False
        self._refreshing = asyncio.Lock()  # concurrent requests subscribe once
        self._stats = {"num_requests": 0, "num_batches": 0, "num_obs": 0, "busy_s": 0.0,
                       "num_weight_updates": 0, "num_weight_pushes": 0, "num_weight_pulls": 0}

    async def compute_actions(self, obs: np.ndarray, explore: bool | None = None,
                              min_version: int = -1) -> dict[str, Any]:
        """Actions and extra outputs for ``obs`` ``[n, ...]``, with the policy version
        used (never older than ``min_version``: the weights the runner's fragment is for)."""
        if self.version < min_version or self._ps is None:
            async with self._refreshing:
                if self.version < min_version or self._ps is None:
                    await self._refresh_weights(None if min_version < 0 else min_version)
        else:
            self._take_pushed()
        fut = asyncio.get_running_loop().create_future()
        self._queue.append((np.asarray(obs), explore, fut))
        self._stats["num_requests"] += 1
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().call_soon(self._flush)
        return await fut

    def _flush(self) -> None:
        """One forward pass per explore setting over every request queued so far."""
        queue, self._queue, self._flushing = self._queue, [], False
        start = time.perf_counter()
        for explore in {e for _, e, _ in queue}:
            part = [(o, f) for o, e, f in queue if e is explore]
            try:
                obs = np.concatenate([o for o, _ in part]) if len(part) > 1 else part[0][0]
                actions, _, extras = call_actions(self.policy, obs, explore=explore)
            except Exception as exc:  # every waiting runner hears of it
                for _, fut in part:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            actions = np.asarray(actions)
            extras = {k: np.asarray(v) for k, v in extras.items()}
            offset = 0
            for o, fut in part:
                n = len(o)
                if not fut.done():
                    fut.set_result({"actions": actions[offset:offset + n],
                                    "extras": {k: v[offset:offset + n] for k, v in extras.items()},
                                    "version": self.version})
                offset += n
            self._stats["num_batches"] += 1
            self._stats["num_obs"] += offset
        self._stats["busy_s"] += time.perf_counter() - start

    def metrics(self) -> dict[str, Any]:
        s = dict(self._stats)
        s["mean_batch"] = s["num_obs"] / s["num_batches"] if s["num_batches"] else 0.0
        return {**s, "device": self.device, "policy_version": self.version}

    def pid(self) -> int:
        return os.getpid()

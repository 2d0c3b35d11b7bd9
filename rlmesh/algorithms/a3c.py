"""A3C, the asynchronous advantage actor-critic (Mnih et al. 2016): A2C's loss, its
gradients computed by each env runner on its own copy of the policy, applied by the
learner in the driver as they arrive.

Each runner loops on its own: sample a fragment with its current weights, compute the
gradient of A2C's loss on it, send it. The driver applies each gradient the moment it
comes (the others' fragments are meanwhile being sampled), sends the new weights to that
runner alone, and asks it for the next one. A gradient may so have been computed on
weights a few updates old (``mean_policy_lag`` in the learner's statistics).
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any

import numpy as np

from rlmesh.algorithms.a2c import A2CTorchPolicy
from rlmesh.algorithms.a3c_config import A3CConfig
from rlmesh.driver.algorithm import Algorithm
from rlmesh.policy.policy import class_path
from rlmesh.runtime import ActorUnavailable

__all__ = ["A3C", "A3CConfig", "A3CTorchPolicy"]


RETRY_S = 0.2  # pause before asking again after a runner failed to answer (restarting)


class A3CTorchPolicy(A2CTorchPolicy):
    """A2C's policy; env runners act with this class itself (torch), not the numpy fast
    path, since they compute gradients too."""

    @classmethod
    def runner_class(cls, config: Any, *spaces: Any) -> str:
        return class_path(cls)


class A3C(Algorithm):
    """Applies the runners' gradients as they arrive, for ``min_time_s_per_iteration``
    seconds or ``train_batch_size`` env steps per iteration. The requests stay in flight
    from one iteration to the next, so the runners never wait for ``train()``."""

    config_class = A3CConfig
    default_policy_class = A3CTorchPolicy
    times_its_own_iteration = True
    supports_multi_agent = False  # gradients from one policy's fragment (docs/multi_agent.md)

    def _on_started(self) -> None:
        self._requests: dict[str, tuple[Any, Future]] = {}  # runner name -> (handle, reply)

    def training_step(self) -> dict[str, dict[str, float]]:
        cfg = self.config
        start = time.perf_counter()
        steps, replies = 0, []
        while steps < cfg.train_batch_size:
            left = (cfg.min_time_s_per_iteration or 0) - (time.perf_counter() - start)
            if replies and left <= 0:
                break
            self._ask_idle_runners()
            futures = [future for _, future in self._requests.values()]
            # Until the first gradient no time limit: each request has its own timeout.
            done, _ = wait(futures, timeout=max(left, 0) if replies else None,
                           return_when=FIRST_COMPLETED)
            for name in [n for n, (_, f) in self._requests.items() if f in done]:
                runner, future = self._requests.pop(name)
                reply = self._result_of(runner, future)
                if reply is None:
                    time.sleep(RETRY_S)
                    continue
                with self.timer("learn_time_s"):
                    version, weights = self._apply(reply)
                self._ask(runner, (version, weights, reply["policy_id"]))
                self.env_runners.record([reply])
                steps += reply["env_steps"]
                reply["policy_lag"] = version - 1 - reply["policy_version"]
                replies.append(reply)
        # For runners that restart (and a restored checkpoint): the newest weights.
        self.env_runners.sync_weights()
        return self._stats(replies)

    def _apply(self, reply: dict[str, Any]) -> tuple[int, dict[str, np.ndarray]]:
        """One optimizer step with a runner's gradient; the new weights and their version."""
        learner, pid = self.learner_group.local, reply["policy_id"]
        # timesteps: the learning-rate schedule's clock; the gradients are not kept with the reply
        learner.apply_gradients({pid: reply.pop("gradients")}, self.timesteps_sampled)
        policy = learner.policies[pid]
        policy.num_env_steps_trained += reply["env_steps"]
        return self.mesh.next_version(), policy.get_weights()

    def _ask_idle_runners(self) -> None:
        runners = self.mesh.healthy_runners()
        if not runners:
            raise RuntimeError("every env runner is gone (see the log for why); A3C cannot "
                               "compute gradients")
        for runner in runners:
            if runner.name not in self._requests:
                self._ask(runner, None)

    def _ask(self, runner: Any, load: tuple[int, dict[str, Any], str] | None) -> None:
        """Ask ``runner`` for its next gradient, after loading ``load``, ``(version, weights,
        policy_id)``, into it when given (else it takes the param server's newer weights)."""
        timeout = self.config.sample_timeout_s

        async def ask() -> dict[str, Any]:
            if load is not None:
                await runner.call("set_weights", *load, timeout=timeout)
            return await runner.call("sample_and_compute_gradients", timeout=timeout)

        self._requests[runner.name] = (
            runner, asyncio.run_coroutine_threadsafe(ask(), self._loop.loop))

    def _result_of(self, runner: Any, future: Future) -> dict[str, Any] | None:
        """The reply, or None when the runner is unavailable and may be restarted."""
        try:
            return future.result()
        except ActorUnavailable as exc:
            self.mesh.runner_unavailable(runner.name, exc, "going on with the others")
            return None

    def _stats(self, replies: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
        """The runners' loss statistics averaged per policy, with what the learner did."""
        out: dict[str, dict[str, float]] = {}
        for pid in {r["policy_id"] for r in replies}:
            mine = [r for r in replies if r["policy_id"] == pid]
            stats = {k: float(np.mean([r["stats"][k] for r in mine])) for k in mine[0]["stats"]}
            policy = self.learner_group.local.policies[pid]
            stats.update(mean_policy_lag=float(np.mean([r["policy_lag"] for r in mine])),
                         num_grad_updates=len(mine),
                         cur_lr=self.config.lr_at(policy.global_timestep),
                         num_env_steps_trained=sum(r["env_steps"] for r in mine))
            out[pid] = stats
        return out

    def stop(self) -> None:
        for _, future in getattr(self, "_requests", {}).values():
            future.cancel()  # also cancels the call on the loop, before the loop stops
        super().stop()

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

import time
from typing import Any

import numpy as np

from rlmesh.algorithms.a2c import A2CTorchPolicy
from rlmesh.algorithms.a3c_config import A3CConfig
from rlmesh.driver.algorithm import Algorithm
from rlmesh.driver.env_runner_group import RunnerRequests
from rlmesh.policy.policy import class_path

__all__ = ["A3C", "A3CConfig", "A3CTorchPolicy"]


RETRY_S = 0.2  # pause before asking again after a runner failed to answer (restarting)


class A3CTorchPolicy(A2CTorchPolicy):
    """A2C's policy; env runners act with this class itself (torch), not the numpy fast
    path, since they compute gradients too."""

    @classmethod
    def runner_class(cls, config: A3CConfig, *spaces: Any) -> str:
        return class_path(cls)


class A3C(Algorithm):
    """Applies the runners' gradients as they arrive, for ``min_time_s_per_iteration``
    seconds or ``train_batch_size`` env steps per iteration. The requests stay in flight
    from one iteration to the next, so the runners never wait for ``train()``."""

    config_class = A3CConfig
    default_policy_class = A3CTorchPolicy
    times_its_own_iteration = True
    supports_multi_agent = False  # gradients from one policy's fragment (docs/multi_agent.md)

    config: A3CConfig

    def _on_started(self) -> None:
        # A gradient request in flight per runner, on the mesh: runner name -> its reply.
        self._requests = RunnerRequests(self.mesh)

    def training_step(self) -> dict[str, dict[str, float]]:
        cfg = self.config
        start = time.perf_counter()
        steps, replies = 0, []
        while steps < cfg.train_batch_size:
            left = (cfg.min_time_s_per_iteration or 0) - (time.perf_counter() - start)
            if replies and left <= 0:
                break
            self._ask_idle_runners()
            # Until the first gradient no time limit: each request has its own timeout.
            done = self._requests.ready(max(left, 0) if replies else None)
            if self._requests.dropped:  # runners unavailable (restarting): a pause
                time.sleep(RETRY_S)
            for runner, reply in done:
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
        runners = self.mesh.runners.healthy_names()
        if not runners:
            raise RuntimeError("every env runner is gone (see the log for why); A3C cannot "
                               "compute gradients")
        for runner in runners:
            if runner not in self._requests:
                self._ask(runner, None)

    def _ask(self, runner: str, load: tuple[int, dict[str, Any], str] | None) -> None:
        """Ask ``runner`` for its next gradient, after loading ``load``, ``(version, weights,
        policy_id)``, into it when given (else it takes the param server's newer weights)."""
        calls = [("set_weights", load, {})] if load is not None else []
        self._requests.start(runner, [*calls, ("sample_and_compute_gradients", (), {})],
                             timeout=self.config.sample_timeout_s)

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
        if getattr(self, "_requests", None) is not None:
            self._requests.cancel()  # the calls on the loop too, before the loop stops
        super().stop()

"""The mesh of an ES or ARS run (the ES declaration of ``topologies.py``: the param server and
ES runners in place of env runners; no learner process), whose runner pool evaluates
perturbations: ``rollouts`` keeps every healthy runner busy until an iteration has its
episodes."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from rlmesh.driver.mesh import Mesh
from rlmesh.driver.on_loop import blocking
from rlmesh.driver.runner_pool import RunnerPool
from rlmesh.driver.topologies import ES
from rlmesh.runtime import ActorUnavailable


class ESRunnerPool(RunnerPool):
    """ES runners: the runner pool's calls, and ``do_rollouts`` over all of them."""

    @blocking
    async def rollouts(self, min_pairs: int, min_steps: int,
                       chunks: int) -> list[dict[str, Any]]:
        """Replies of ``do_rollouts`` until they hold ``min_pairs`` mirrored pairs and
        ``min_steps`` env steps. Each runner is called again as soon as it answers, with
        about ``1 / chunks`` of its share of what is still missing, so a slow or dying
        runner holds up (or loses) little: the others evaluate its part."""
        got: list[dict[str, Any]] = []
        have = {"pairs": 0, "steps": 0}

        def missing() -> tuple[int, int]:
            return max(0, min_pairs - have["pairs"]), max(0, min_steps - have["steps"])

        async def drive(runner: Any, n: int) -> None:
            while any(missing()):
                pairs, steps = missing()
                share = n * chunks
                try:
                    reply = await runner.call("do_rollouts", math.ceil(pairs / share),
                                              math.ceil(steps / share),
                                              timeout=self.config.sample_timeout_s)
                except ActorUnavailable as exc:  # died mid-call: its episodes are lost
                    self.fragments_missed += 1
                    self.unavailable(runner.name, exc, "the others evaluate its share")
                    return
                got.append(reply)
                have["pairs"] += len(reply["noise_indices"])
                have["steps"] += int(reply["env_steps"])

        deadline = None
        while any(missing()):
            if not self.num_live():
                raise RuntimeError("every ES runner is gone (see the log for why); the run "
                                   "cannot evaluate perturbations")
            runners = self.healthy()
            if not runners:  # all restarting: wait for them, not for ever
                timeout = self.config.sample_timeout_s or 3600
                deadline = deadline or time.monotonic() + timeout
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no ES runner answered for {timeout} s")
                await asyncio.sleep(0.2)
                continue
            deadline = None
            await asyncio.gather(*(drive(r, len(runners)) for r in runners))
        return got


class ESMesh(Mesh):
    """A synchronous mesh whose runners evaluate perturbations (``mesh.runners.rollouts``)."""

    topology = ES
    runner_pool_class = ESRunnerPool

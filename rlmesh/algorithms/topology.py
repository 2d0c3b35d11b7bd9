"""The one place that wires a run's processes: which roles, how many, who talks to whom.

Synchronous algorithms (PPO): a param server in the driver process, ``num_env_runners``
env-runner processes (or one runner in the driver when it is 0), and the learner group.
Runners pull weights from the param server at the start of each fragment.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from rlmesh.algorithms.config import AlgorithmConfig
from rlmesh.envs import env_registry
from rlmesh.runtime import ActorUnavailable, Job, RestartPolicy

log = logging.getLogger(__name__)

ENV_RUNNER = "rlmesh.roles.env_runner:EnvRunner"
POLICY_SERVER_RUNNER = "rlmesh.roles.policy_server:PolicyServerRunner"
PARAM_SERVER = "rlmesh.roles.paramserver:ParamServer"


class Mesh:
    """The processes of one run, and the few things the driver asks of them."""

    def __init__(self, config: AlgorithmConfig, loop_thread: Any) -> None:
        self.config = config
        self.loop_thread = loop_thread
        self.job: Job | None = None
        self.param_server: Any = None
        self.runners: list[Any] = []
        self.version = 0
        self.restarts = 0
        self._gone: set[str] = set()

    async def start(self, learner_group: Any) -> None:
        await self.start_runners()
        await learner_group.start_remote(self.job)

    async def start_runners(self) -> None:
        """The job, the param server and the env runners (or policy servers)."""
        cfg = self.config
        self.job = await Job("ipc").start()
        self.job.supervisor.listeners.append(self._on_event)
        self.param_server = await self.job.spawn(PARAM_SERVER, name="param_server", in_process=True)
        runner_config = {**cfg.to_dict(), "_env_registry": env_registry()}
        policy = RestartPolicy(max_restarts=cfg.max_num_env_runner_restarts
                               if cfg.restart_failed_env_runners else 0)
        # External simulators: runners that serve PolicyClients instead of stepping envs.
        runner_cls = ENV_RUNNER if cfg.policy_server_address is None else POLICY_SERVER_RUNNER
        if cfg.num_env_runners == 0:
            # As RLlib's local env runner: sampling happens in the driver process.
            self.runners = [await self.job.spawn(runner_cls, runner_config, 0, name="env_runner-0",
                                                 in_process=True)]
        else:
            self.runners = list(await asyncio.gather(*(
                self.job.spawn(runner_cls, runner_config, i, name=f"env_runner-{i}",
                               restart=policy, role="EnvRunner")
                for i in range(1, cfg.num_env_runners + 1))))

    def _on_event(self, event: Any) -> None:
        if event.kind == "restarted":
            self.restarts += 1
        elif event.kind == "gave_up":
            self._gone.add(event.name)

    async def publish(self, weights: dict[str, Any]) -> None:
        self.version += 1
        await self.param_server.set_weights(self.version, weights)

    async def sample(self, target_steps: int) -> list[dict[str, Any]]:
        """Fragments from every runner, round after round, until ``target_steps`` env steps."""
        fragments: list[dict[str, Any]] = []
        steps = 0
        deadline = None
        while steps < target_steps:
            runners = self.healthy_runners()
            if not runners:
                raise RuntimeError("every env runner is gone (see the log for why); "
                                   "the run cannot sample")
            got = await asyncio.gather(*(self._sample_one(r) for r in runners))
            got = [f for f in got if f is not None]
            if not got:
                # Runners are restarting: wait for them, but not for ever.
                timeout = self.config.sample_timeout_s
                deadline = deadline or (time.monotonic() + (timeout or 3600))
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no env runner delivered a fragment for {timeout} s")
                await asyncio.sleep(0.2)
                continue
            deadline = None
            fragments.extend(got)
            steps += sum(f["env_steps"] for f in got)
            if all(f.get("idle") for f in got):
                break  # policy servers whose clients sent nothing in time: an idle iteration
        return fragments

    async def _sample_one(self, runner: Any) -> dict[str, Any] | None:
        try:
            return await runner.call("sample", timeout=self.config.sample_timeout_s)
        except ActorUnavailable as exc:
            if not self.config.restart_failed_env_runners:
                raise RuntimeError(f"env runner {runner.name} failed: {exc}") from None
            log.warning("env runner %s unavailable (%s); sampling with the others",
                        runner.name, str(exc).splitlines()[0])
            return None

    def healthy_runners(self) -> list[Any]:
        return [r for r in self.runners if r.name not in self._gone]

    def num_healthy_runners(self) -> int:
        return len(self.healthy_runners())

    async def foreach_runner(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        return list(await asyncio.gather(*(r.call(method, *args, **kwargs)
                                           for r in self.healthy_runners())))

    async def stop(self) -> None:
        if self.job is not None:
            await self.job.shutdown()
            self.job = None

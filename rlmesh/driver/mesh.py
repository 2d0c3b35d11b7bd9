"""The one place that wires a run's processes: which roles, how many, who talks to whom.

Synchronous algorithms (PPO): a param server in the driver process, ``num_env_runners``
env-runner processes (or one runner in the driver when it is 0), and the learners
(``num_learners`` actors, data-parallel when several; none: the learner in the driver).
The param server pushes each new weights version to the runners, which take it at their
next fragment boundary; learner actors publish to it directly.

The mesh is the driver's only owner of the event loop (``driver/loop.py``) and of every
remote call: its public methods are a synchronous facade (``sample``, ``publish``,
``foreach_runner``, ``evaluate``, ``stop`` ...) that the algorithm and the rest of the driver
call from their own thread; the coroutines behind them are its ``_``-prefixed methods.
The asynchronous meshes (IMPALA's, APEX's) are in ``async_mesh.py``, ES's in ``es_mesh.py``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from typing import Any, Coroutine, Sequence, TypeVar

from rlmesh.runtime.import_path import startup_code
from rlmesh.config.base import AlgorithmConfig
from rlmesh.driver.inference_choice import choose_inference
from rlmesh.driver.loop import LoopThread
from rlmesh.driver.runner_faults import EnvCrashed, crash_message, runner_restart_policy
from rlmesh.config.settings import ConfigError
from rlmesh.envs import env_registry
from rlmesh.named_actors import start_named_actors
from rlmesh.policy.policy import class_path
from rlmesh.runtime import ActorUnavailable, RestartPolicy, handed
from rlmesh.runtime.job import Job, jobs_are_local, make_job
from rlmesh.runtime.process import prestart
from rlmesh.roles.inference_actor import INFERENCE_ACTOR

log = logging.getLogger(__name__)

T = TypeVar("T")

ENV_RUNNER = "rlmesh.roles.env_runner:EnvRunner"
POLICY_SERVER_RUNNER = "rlmesh.roles.policy_server:PolicyServerRunner"
PARAM_SERVER = "rlmesh.roles.paramserver:ParamServer"
LEARNER = "rlmesh.roles.learner_actor:LearnerActor"
AGGREGATOR = "rlmesh.roles.aggregator:Aggregator"
REPLAY_SHARD = "rlmesh.roles.replay_shard:ReplayShard"
EVAL_RUNNER = "rlmesh.roles.eval_runner:EvalRunner"
INFERENCE = "rlmesh.roles.inference_actor:InferenceActor"
# beyond evaluation_sample_timeout_s: an evaluation runner stuck inside one env step
EVAL_CALL_MARGIN_S = 30.0


def actor_env(cfg: AlgorithmConfig) -> dict[str, str]:
    """What the run's actor processes find in their environment: log_level reaches every
    process; their log files keep INFO at least (the lines shown when a process dies)."""
    return {"RLMESH_LOG_LEVEL": "DEBUG" if cfg.log_level == "DEBUG" else "INFO"}


def check_lambdas_can_go(cfg: AlgorithmConfig) -> None:
    """One line, before any process starts, when a launched cluster's run names a lambda or
    a local definition (runtime/handed.py): only this machine's processes can be handed
    them, through the pipe they start with; a node imports code by path. Locally, one that
    cannot be handed (it holds a lock) is the one line instead."""
    if jobs_are_local():
        handed.payload()
        return
    data = cfg.to_dict()
    registry = env_registry()
    if isinstance(cfg.env, str) and cfg.env in registry:
        data[f"the creator of env {cfg.env!r} (register_env)"] = registry[cfg.env]
    refusal = handed.remote_refusal(data)
    if refusal is not None:
        raise ConfigError(refusal)


def prestart_runners(cfg: AlgorithmConfig) -> None:
    """Start the env runners' interpreters now, before the run is built: ``rlmesh train``
    calls this before it imports torch, so their imports overlap its own (each is about a
    second); the runners the Mesh starts take them over (runtime.process.WarmProcess)."""
    if (cfg.num_env_runners < 1 or cfg.policy_server_address is not None
            or not jobs_are_local() or not _known_env(cfg.env)):
        return
    prestart(cfg.num_env_runners, actor_env(cfg), [ENV_RUNNER.partition(":")[0]])


def _known_env(env: Any) -> bool:
    """A gymnasium id or a registered name: a misspelt one fails before anything starts."""
    import gymnasium as gym

    return isinstance(env, str) and (env in gym.registry or env in env_registry())


class SampleTimeout(RuntimeError):
    """No env runner delivered a fragment within ``sample_timeout_s`` (a hung env); the CLI
    prints it as one line."""


class Totals:
    """Counters summed over processes that restart: each reports its own count since it
    started, which begins again at 0 after a restart; the totals only ever grow."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], int] = {}
        self.total: dict[str, int] = {}

    def add(self, who: str, counters: dict[str, Any]) -> None:
        for key, value in counters.items():
            value = int(value)
            last = self._last.get((who, key), 0)
            self._last[(who, key)] = value
            # Lower than last time: a new process, whose whole count is new.
            self.total[key] = self.total.get(key, 0) + (value - last if value >= last else value)

    def restarted(self, who: str) -> None:
        """``who`` is a new process: its next counts are all new (even above the old ones)."""
        for key in [k for k in self._last if k[0] == who]:
            self._last[key] = 0

    def __getitem__(self, key: str) -> int:
        return self.total.get(key, 0)


class Mesh:
    """The processes of one run, and the few things the driver asks of them: each public
    method is synchronous (call it from the driver's thread, never from the loop's)."""

    asynchronous = False
    #: The actor class of the runners (ES and ARS name their own, ``ESRunner``).
    runner_path = ENV_RUNNER

    def __init__(self, config: AlgorithmConfig, policy_specs: dict[str, Any]) -> None:
        self.config = config
        # The run's event loop: every call to a process of the run is a coroutine on it.
        self.loop_thread = LoopThread()
        self.policy_specs = policy_specs
        self.learners: list[Any] = []
        self.learner_failure: str | None = None
        self.runner_failure: str | None = None  # an env that kept crashing its runner
        self.failed_learner: str | None = None  # its actor name
        self.job: Job | None = None
        self.param_server: Any = None
        self.runners: list[Any] = []
        self.version = 0
        self.restarts = 0
        self._gone: set[str] = set()  # given up on
        self._down: set[str] = set()  # died or hung, being restarted
        self._unavailable: dict[str, Exception] = {}  # why each runner last missed a round
        # Sampling rounds a runner missed (down, or died mid-call) since the driver last
        # asked: the shortfall the others made up for.
        self.fragments_missed = 0
        self.totals = Totals()
        # Weights this process sent the param server (a learner here); learner actors send
        # theirs straight (publish): then this stays 0.
        self.weights_bytes_published = 0
        self.eval_runners: list[Any] = []  # started by start_eval_runners, on first use
        self.inference: dict[str, Any] = {"mode": "runner"}  # where actions are computed
        self.inference_actor: Any = None

    # --- the loop ---

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """``coro`` run on the mesh's loop, its result (the facade's own plumbing, and tests
        that call an actor directly)."""
        return self.loop_thread.run(coro, timeout)

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """``coro`` started on the mesh's loop; its future (cancelling it cancels the call)."""
        return self.loop_thread.submit(coro)

    # --- starting and stopping ---

    def start_runners(self) -> concurrent.futures.Future[None]:
        """Start the job, the param server and the env runners on the loop and return at
        once: the runners' processes start (imports, envs) while the driver builds the
        learner; ``.result()`` waits for them."""
        return self.submit(self._start_runners())

    def start_learners(self, policy_specs: dict[str, Any]) -> None:
        self.run(self._start_learners(policy_specs))

    def stop(self) -> None:
        """Every process of the run stopped, then the loop: the mesh is done."""
        try:
            if self.job is not None:
                self.run(self.job.shutdown(), timeout=30)
                self.job = None
        finally:
            self.loop_thread.close()

    async def _start_runners(self) -> None:
        """The job, the param server and the env runners (or policy servers)."""
        cfg = self.config
        # Local processes over ipc, or, under `rlmesh launch`, the cluster's job, which
        # places each actor on a node by this request.
        self.job = await make_job(cfg.resource_request())
        self.job.supervisor.listeners.append(self._on_event)
        self.job.child_env.update(actor_env(cfg))
        # The user's named actors first: envs and callbacks may call them from the start.
        await start_named_actors(self.job, cfg.named_actors)
        self.param_server = await self.job.spawn(PARAM_SERVER, name="param_server", in_process=True)
        runner_config = {**cfg.to_dict(), "_env_registry": env_registry(),
                         "_config_class": class_path(type(cfg)),
                         "_policy_specs": self.policy_specs}
        runner_config.update(startup_code(runner_config))
        policy = runner_restart_policy(cfg)
        await self._start_inference(runner_config, policy)
        # External simulators: runners that serve PolicyClients instead of stepping envs.
        runner_cls = self.runner_path if cfg.policy_server_address is None else POLICY_SERVER_RUNNER
        if cfg.num_env_runners == 0:
            # As RLlib's local env runner: sampling happens in the driver process.
            self.runners = [await self.job.spawn(runner_cls, config=runner_config, worker_index=0,
                                                 name="env_runner-0",
                                                 in_process=True)]
        else:
            self.runners = list(await asyncio.gather(*(
                self.job.spawn(runner_cls, config=runner_config, worker_index=i,
                               name=f"env_runner-{i}",
                               restart=policy, role="EnvRunner")
                for i in range(1, cfg.num_env_runners + 1))))

    async def _start_inference(self, runner_config: dict[str, Any], policy: Any) -> None:
        """The central inference actor, when ``inference_mode`` resolves to it; it is
        restarted as a runner is, and the runners wait for it meanwhile."""
        self.inference = choose_inference(self.config, self.policy_specs)
        log.info("inference: %s (%s)", self.inference["mode"], self.inference["reason"])
        if self.inference["mode"] != "central" or self.config.num_env_runners == 0:
            return
        threads = max(1, int(self.inference.get("spare_cores", 1) or 1))
        self.inference_actor = await self.job.spawn(
            INFERENCE, config=runner_config, name=INFERENCE_ACTOR, role="Inference",
            restart=RestartPolicy(max_restarts=max(policy.max_restarts, 1000)),
            env={"OMP_NUM_THREADS": str(threads)})
        runner_config["_inference_actor"] = INFERENCE_ACTOR

    async def _start_learners(self, policy_specs: dict[str, Any]) -> None:
        """``max(1, num_learners)`` learner actors (in the driver process when
        ``num_learners`` is 0), data-parallel when more than one: rank 0 listens on its own
        node, and every rank is told where before its first update (the learners may sit on
        different nodes of a launched cluster)."""
        cfg = self.config
        n = max(1, cfg.num_learners)
        threads = cfg.num_cpus_per_learner if isinstance(cfg.num_cpus_per_learner, (int, float)) else 1
        # The code add_policy messages may name there: what the runners may run (import_path).
        code = startup_code({"config": cfg.to_dict(), "policies": policy_specs})
        self.learners = list(await asyncio.gather(*(
            self.job.spawn(LEARNER, config=cfg.to_dict(), config_cls=class_path(type(cfg)),
                           policy_specs=policy_specs, rank=rank, world_size=n,
                           code_roots=code["_code_roots"], main_script=code["_main_script"],
                           name=f"learner-{rank}", role="Learner",
                           in_process=cfg.num_learners == 0,
                           restart=RestartPolicy(max_restarts=0),
                           env={"OMP_NUM_THREADS": str(max(1, int(threads)))})
            for rank in range(n))))
        if n > 1:
            address = await self.learners[0].call("dp_listen")
            await asyncio.gather(*(learner.call("set_dp_address", address)
                                   for learner in self.learners[1:]))

    def _on_event(self, event: Any) -> None:
        if event.kind == "restarted" and event.name.startswith("env_runner-"):
            self.restarts += 1
        if event.kind in ("died", "hung"):
            self._down.add(event.name)
        elif event.kind == "restarted":
            self._down.discard(event.name)
            self.totals.restarted(event.name)
        elif event.kind == "gave_up":
            self._gone.add(event.name)
            if event.cause == "crashes" and "runner-" in event.name:
                self.runner_failure = self.runner_failure or crash_message(self.config, event)
        if event.name.startswith("learner-") and event.kind in ("died", "hung"):
            self.learner_failure = f"{event.name} {event.kind}: {event.detail}"
            self.failed_learner = event.name
            if event.last_lines:
                self.learner_failure += "\n  last lines:\n    " + "\n    ".join(event.last_lines[-10:])

    def next_version(self) -> int:
        """A weights version above every one published or handed out before: weights sent
        to one runner directly (A3C) count from the same number, so a runner always takes
        the newer of those and the param server's."""
        self.version += 1
        return self.version

    def publish(self, weights: dict[str, Any] | None = None,
                policies: list[str] | None = None) -> int:
        """A new weights version to the param server, which pushes it to the runners; the
        version. ``weights`` (``{policy_id: weights}``): a learner's in this process. None:
        learner rank 0 sends its own (of ``policies``, default all) straight to the param
        server, and only the version comes back here."""
        return self.run(self._publish(weights, policies))

    def publish_async(self, weights: dict[str, Any]) -> concurrent.futures.Future[int]:
        """``publish``, without waiting for it (a learner that trains on meanwhile)."""
        return self.submit(self._publish(weights))

    async def _publish(self, weights: dict[str, Any] | None = None,
                       policies: list[str] | None = None) -> int:
        version = self.next_version()
        if weights is None:
            await self.learners[0].call("publish", version, policies, timeout=120)
        else:
            self.weights_bytes_published += sum(
                int(getattr(a, "nbytes", 0)) for w in weights.values() for a in w.values())
            await self.param_server.call("set_weights", version, weights)
        return version

    def latest_weights(self, policy_id: str) -> tuple[int, dict[str, Any]] | None:
        """The param server's newest ``(version, weights)`` of ``policy_id`` (None before
        any), read in this process: no socket, no copy (the driver's own policy copies)."""
        if self.job is None or self.param_server is None:
            return None
        return self.job.local_actor(self.param_server.name).latest(policy_id)

    # --- the env runners ---

    def sample(self, target_steps: int) -> list[dict[str, Any]]:
        """Fragments from every healthy runner, round after round, until ``target_steps``
        env steps. A runner being restarted is left out (RLlib's semantics: the others fill
        the iteration); the rounds it missed are counted in ``fragments_missed``. Each
        runner acts with the newest published weights: one whose push has not arrived yet
        (it travels apart from the sample call, on the param server's socket) asks for them."""
        return self.run(self._sample(target_steps, weights_up_to=self.version))

    def sample_ahead(self, target_steps: int) -> concurrent.futures.Future[list[dict[str, Any]]]:
        """``sample``, started now and not waited for, by runners that keep the weights
        version they hold now (a batch sampled ahead, ``EnvRunnerGroup.sample``)."""
        return self.submit(self._sample(target_steps, weights_up_to=self.version))

    async def _sample(self, target_steps: int,
                      weights_up_to: int | None = None) -> list[dict[str, Any]]:
        fragments: list[dict[str, Any]] = []
        steps = 0
        deadline = None
        while steps < target_steps:
            self.check_runners()
            if not self.num_live_runners():
                raise RuntimeError("every env runner is gone (see the log for why); "
                                   "the run cannot sample")
            runners = self.healthy_runners()
            got = await asyncio.gather(*(self._sample_one(r, weights_up_to) for r in runners))
            got = [f for f in got if f is not None]
            if got:  # a round the others made: what the runners down or dying missed
                self.fragments_missed += self.num_live_runners() - len(got)
            if not got:
                # Runners are restarting: wait for them, but not for ever.
                timeout = self.config.sample_timeout_s
                deadline = deadline or (time.monotonic() + (timeout or 3600))
                if time.monotonic() > deadline:
                    raise SampleTimeout(self._sample_timeout_message(timeout))
                await asyncio.sleep(0.2)
                continue
            deadline = None
            fragments.extend(got)
            by = "agent_steps" if self.config.count_steps_by == "agent_steps" else "env_steps"
            steps += sum(f.get(by, f["env_steps"]) for f in got)
            if all(f.get("idle") for f in got):
                break  # policy servers whose clients sent nothing in time: an idle iteration
        return fragments

    async def _sample_one(self, runner: Any,
                          weights_up_to: int | None = None) -> dict[str, Any] | None:
        try:
            ask = {} if weights_up_to is None else {"weights_up_to": weights_up_to}
            fragment = await runner.call("sample", timeout=self.config.sample_timeout_s, **ask)
        except ActorUnavailable as exc:
            self.runner_unavailable(runner.name, exc, "sampling with the others")
            self._unavailable[runner.name] = exc
            return None
        self.env_errors(runner.name, fragment)
        return fragment

    def _sample_timeout_message(self, timeout: float | None) -> str:
        """One line for ``SampleTimeout``: which runners, which env, and the setting."""
        late = [n for n, e in self._unavailable.items() if "did not answer" in str(e)]
        who = ", ".join(late or sorted(self._unavailable) or self.runner_names())
        env = self.config.env if isinstance(self.config.env, str) else type(self.config.env).__name__
        return (f"no env runner delivered a fragment for {timeout} s ({who}, env {env!r}): an "
                f"env's reset() or step() hangs, or takes longer than sample_timeout_s "
                f"({timeout}); fix the env, or raise sample_timeout_s for a slow one")

    def env_errors(self, runner: str, fragment: dict[str, Any]) -> None:
        """Count a runner's env errors; the first one's traceback shown once, here."""
        self.totals.add(runner, {"num_env_errors": fragment.pop("num_env_errors", 0)})
        if self.job is not None:  # its env steps, toward env_runner_crash_window
            self.job.supervisor.add_work(runner, int(fragment.get("env_steps", 0)))
        first = fragment.pop("env_error", None)
        if first is not None:
            log.warning("%s: %s(the env was recreated; the count of env errors is "
                        "num_env_errors in the results)", runner, first)

    def runner_unavailable(self, name: str, exc: ActorUnavailable, going_on: str) -> None:
        """A call to env runner ``name`` found it gone: an error when failed runners are not
        restarted, else a warning (it comes back; the run goes on meanwhile)."""
        self.check_runners()
        if not self.config.restart_failed_env_runners:
            raise RuntimeError(f"env runner {name} failed: {exc}") from None
        # A death the supervisor has said in its own line: not a second one.
        log.log(logging.DEBUG if name in self._down else logging.WARNING,
                "env runner %s unavailable (%s); %s", name, str(exc).splitlines()[0], going_on)

    def check_runners(self) -> None:
        """EnvCrashed once an env has taken its runner down too often (runner_faults.py)."""
        if self.runner_failure is not None:
            raise EnvCrashed(self.runner_failure)

    def healthy_runners(self) -> list[Any]:
        """The runners up now: neither given up on nor being restarted."""
        return [r for r in self.runners if r.name not in self._gone and r.name not in self._down]

    def healthy_runner_names(self) -> list[str]:
        return [r.name for r in self.healthy_runners()]

    def runner_names(self) -> list[str]:
        """Every runner's actor name (``env_runner-<worker index>``), in order."""
        return [r.name for r in self.runners]

    def num_live_runners(self) -> int:
        """Runners not given up on (those being restarted included)."""
        return sum(r.name not in self._gone for r in self.runners)

    def pop_fragments_missed(self) -> int:
        missed, self.fragments_missed = self.fragments_missed, 0
        return missed

    def num_healthy_runners(self) -> int:
        return len(self.healthy_runners())

    def foreach_runner(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """``method(*args, **kwargs)`` on every healthy runner; the replies in runner order."""
        return self.run(self._foreach_runner(method, *args, **kwargs))

    async def _foreach_runner(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        return list(await asyncio.gather(*(r.call(method, *args, **kwargs)
                                           for r in self.healthy_runners())))

    def runner_calls(self, name: str,
                     calls: Sequence[tuple[str, tuple[Any, ...], dict[str, Any]]],
                     timeout: float | None = None) -> concurrent.futures.Future[Any]:
        """Runner ``name``'s ``calls`` (``(method, args, kwargs)``), one after the other,
        started now and not waited for; the future of the last one's reply. Cancelling it
        cancels the call in flight."""
        runner = next(r for r in self.runners if r.name == name)

        async def in_turn() -> Any:
            reply = None
            for method, args, kwargs in calls:
                reply = await runner.call(method, *args, timeout=timeout, **kwargs)
            return reply

        return self.submit(in_turn())

    def send_weights(self, names: list[str], version: int,
                     weights: dict[str, dict[str, Any]]) -> None:
        """``weights`` (by policy id) straight to the runners ``names`` under ``version``,
        past the param server (A3C: the runner whose gradient was just applied). A runner
        restarting takes the param server's weights when it is back."""
        runners = [r for r in self.runners if r.name in names]

        async def send() -> list[Any]:
            return await asyncio.gather(*(r.call("set_weights", version, w, pid)
                                          for r in runners for pid, w in weights.items()),
                                        return_exceptions=True)

        for outcome in self.run(send()):
            if isinstance(outcome, ActorUnavailable) and self.config.restart_failed_env_runners:
                log.warning("weights not sent: %s", str(outcome).splitlines()[0])
            elif isinstance(outcome, BaseException):
                raise outcome

    def remove_policy_weights(self, policy_id: str) -> None:
        """The param server forgets ``policy_id`` (a policy removed while training)."""
        self.run(self.param_server.call("remove_policy", policy_id))

    def sync_filters(self, obs_filter: Any) -> None:
        """Every runner's new observation statistics merged into ``obs_filter`` (the
        driver's global one), which then goes back to every runner. A runner gone meanwhile
        takes the global statistics at the next sync."""
        self.run(self._sync_filters(obs_filter))

    async def _sync_filters(self, obs_filter: Any) -> None:
        runners = self.healthy_runners()
        updates = await self._on_each(runners, lambda r: r.call("get_filter_updates"),
                                      "its statistics wait")
        for update in updates:
            obs_filter.merge_buffer(update)
        state = obs_filter.get_state()
        await self._on_each(runners, lambda r: r.call("set_filter_state", state),
                            "it syncs when back")

    async def _on_each(self, runners: list[Any], call: Any, going_on: str) -> list[Any]:
        """``call(runner)`` on every runner at once; the replies of those that answered. A
        runner gone meanwhile is left out (``runner_unavailable``, ``going_on``); any other
        error is raised."""
        got = await asyncio.gather(*(call(r) for r in runners), return_exceptions=True)
        for runner, outcome in zip(runners, got):
            if isinstance(outcome, ActorUnavailable):
                self.runner_unavailable(runner.name, outcome, going_on)
            elif isinstance(outcome, BaseException):
                raise outcome
        return [g for g in got if not isinstance(g, BaseException)]

    # --- the evaluation runners ---

    def start_eval_runners(self, runner_config: dict[str, Any], count: int) -> None:
        """``count`` evaluation runners (``eval_runner-<i>``), restarted as env runners are;
        with 0, one in the driver process (``eval_runner-0``)."""
        self.run(self._start_eval_runners(runner_config, count))

    async def _start_eval_runners(self, runner_config: dict[str, Any], count: int) -> None:
        if count == 0:
            self.eval_runners = [await self.job.spawn(
                EVAL_RUNNER, config=runner_config, worker_index=0, param_server=None,
                name="eval_runner-0", in_process=True)]
            return
        policy = runner_restart_policy(self.config)
        self.eval_runners = list(await asyncio.gather(*(
            self.job.spawn(EVAL_RUNNER, config=runner_config, worker_index=i, param_server=None,
                           name=f"eval_runner-{i}",
                           restart=policy, role="EvalRunner")
            for i in range(1, count + 1))))

    def evaluate(self, version: int, weights: dict[str, Any], filter_state: Any,
                 amounts: list[int], stems: list[str | None]
                 ) -> concurrent.futures.Future[tuple[list[dict[str, Any]], float]]:
        """Started now: each evaluation runner takes ``weights`` (under ``version``) and
        the filter state, then evaluates its amount (``amounts``, in runner order; 0: it
        sits this one out), its videos named from its stem. The future's result: the
        replies of the runners that answered, and the seconds it took."""
        return self.submit(self._evaluate(version, weights, filter_state, amounts, stems))

    async def _evaluate(self, version: int, weights: dict[str, Any], filter_state: Any,
                        amounts: list[int], stems: list[str | None]
                        ) -> tuple[list[dict[str, Any]], float]:
        start = time.perf_counter()
        calls = [self._evaluate_on(r, version, weights, filter_state, amount, stem)
                 for r, amount, stem in zip(self.eval_runners, amounts, stems) if amount]
        got = [g for g in await asyncio.gather(*calls) if g is not None]
        return got, time.perf_counter() - start

    async def _evaluate_on(self, runner: Any, version: int, weights: dict[str, Any],
                           filter_state: Any, amount: int,
                           stem: str | None) -> dict[str, Any] | None:
        cfg = self.config
        try:
            for pid, w in weights.items():
                await runner.call("set_weights", version, w, pid)
            if cfg.observation_filter != "NoFilter":
                await runner.call("set_filter_state", filter_state)
            return await runner.call("evaluate", cfg.evaluation_duration_unit, amount,
                                     cfg.evaluation_sample_timeout_s, stem,
                                     timeout=cfg.evaluation_sample_timeout_s + EVAL_CALL_MARGIN_S)
        except ActorUnavailable as exc:  # restarted for the next evaluation; this one goes on
            if not cfg.restart_failed_env_runners:
                raise RuntimeError(f"evaluation runner {runner.name} failed: {exc}") from None
            log.warning("evaluation runner %s unavailable (%s); evaluating with the others",
                        runner.name, str(exc).splitlines()[0])
            return None

    # --- the learner actors ---

    @property
    def num_learners(self) -> int:
        """Learner actors started (data-parallel ranks); 0 before ``start_learners``."""
        return len(self.learners)

    def foreach_learner(self, method: str, *args: Any, timeout: float | None = 60,
                        **kwargs: Any) -> list[Any]:
        """``method(*args, **kwargs)`` on every learner actor; the replies by rank."""
        return self.run(self._on_learners(method, [args] * len(self.learners), kwargs, timeout))

    def call_learner(self, method: str, *args: Any, timeout: float | None = 60) -> Any:
        """``method(*args)`` on learner 0 (every rank holds the same weights and state)."""
        return self.run(self.learners[0].call(method, *args, timeout=timeout))

    def update_learners(self, per_rank: list[tuple[Any, ...]], kwargs: dict[str, Any]
                        ) -> concurrent.futures.Future[list[Any]]:
        """``update(*per_rank[r], **kwargs)`` on every learner rank ``r``, started now: the
        future of their replies by rank (an update has no timeout: it takes what it takes)."""
        return self.submit(self._on_learners("update", per_rank, kwargs, None))

    async def _on_learners(self, method: str, per_rank: Sequence[tuple[Any, ...]],
                           kwargs: dict[str, Any], timeout: float | None) -> list[Any]:
        return list(await asyncio.gather(*(h.call(method, *args, **kwargs, timeout=timeout)
                                           for h, args in zip(self.learners, per_rank))))

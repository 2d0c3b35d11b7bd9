"""The driver's view of the env runners (RLlib's EnvRunnerGroup): sample from all of them,
push the learners' weights to them, reach every runner or env with a function (by import
path; a lambda or local function on this machine through the spawn channel, never a
socket), or start calls on them and collect the results as they come
(``foreach_env_runner_async``). What they sampled is counted here for results."""

from __future__ import annotations

import concurrent.futures
import logging
from typing import TYPE_CHECKING, Any, Callable

from rlmesh.runtime import ActorUnavailable, handed
from rlmesh.runtime.import_path import MAIN, path_of
from rlmesh.runtime.job import jobs_are_local

if TYPE_CHECKING:
    from rlmesh.driver.run_view import RunView
    from rlmesh.driver.mesh import Mesh

log = logging.getLogger(__name__)


def function_path(fn: Callable[..., Any], what: str) -> str:
    """The import path of a module-level function; for a lambda or a nested function (a
    closure over the caller's variables included) the token this machine's runners are
    handed it by, on the pipe each was started with (runtime/handed.py), sent before this
    returns. On a launched cluster such a function is a one-line error: nodes import code
    by path, nothing is pickled across machines."""
    name = getattr(fn, "__qualname__", repr(fn))
    if handed.needs_handing(fn):
        if not jobs_are_local():
            raise ValueError(f"{what} {name} cannot reach the env runners of a launched "
                             "cluster: their nodes import a function by its path, so define "
                             "it at module level (def my_fn(env_runner): ...) and pass that")
        token = handed.token_for(fn)
        handed.hand_new()
        return token
    if getattr(fn, "__module__", None) in ("__main__", MAIN):  # the script runners know by name
        return f"{MAIN}:{name}"
    return path_of(fn, what)


class RunnerRequests:
    """A call in flight per env runner, started on the mesh, collected as each finishes
    (``foreach_env_runner_async``; A3C's gradient requests)."""

    def __init__(self, mesh: Mesh) -> None:
        self.mesh = mesh
        self._in_flight: dict[str, concurrent.futures.Future[Any]] = {}  # by runner name
        self.dropped: list[str] = []  # runners whose request the last ``ready`` dropped

    def __contains__(self, runner: str) -> bool:
        return runner in self._in_flight

    def __len__(self) -> int:
        return len(self._in_flight)

    def start(self, runner: str, calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]],
              timeout: float | None = None) -> None:
        """``calls`` (``(method, args, kwargs)``) on ``runner`` one after the other; the
        last one's reply is what ``ready`` gives."""
        self._in_flight[runner] = self.mesh.runners.calls(runner, calls, timeout)

    def ready(self, timeout: float | None) -> list[tuple[str, Any]]:
        """``(runner, reply)`` of every request that has finished, waiting up to
        ``timeout`` seconds (None: as long as it takes) for the first. The request of a
        runner that died (being restarted) is dropped with a warning (``dropped`` names
        them); a call that raised raises here."""
        self.dropped = []
        if not self._in_flight:
            return []
        concurrent.futures.wait(list(self._in_flight.values()), timeout,
                                return_when=concurrent.futures.FIRST_COMPLETED)
        out: list[tuple[str, Any]] = []
        for name, future in list(self._in_flight.items()):
            if not future.done():
                continue
            del self._in_flight[name]
            try:
                out.append((name, future.result()))
            except ActorUnavailable as exc:
                self.mesh.runners.unavailable(name, exc, "its call is dropped")
                self.dropped.append(name)
        return out

    def cancel(self) -> None:
        """Cancel every request (and its call on the mesh's loop)."""
        for future in self._in_flight.values():
            future.cancel()
        self._in_flight.clear()


class EnvRunnerGroup:
    """Every env runner of a run, and what they sampled since the last result."""

    def __init__(self, algo: RunView) -> None:
        self._algo = algo
        self.mesh = algo.mesh
        self.config = algo.config
        self.fragments: list[dict[str, Any]] = []  # sampled since the last result, for metrics
        self.env_steps = 0
        # Calls started by foreach_env_runner_async and not yet fetched, by runner name.
        self._in_flight = RunnerRequests(self.mesh)
        # sample_async: the next batch, sampling while the driver learns on this one.
        self._ahead: tuple[int, concurrent.futures.Future] | None = None

    # --- sampling ---

    def sample(self, max_env_steps: int) -> list[dict[str, Any]]:
        """Fragments from every healthy runner, round after round, until ``max_env_steps``
        env steps (see ``synchronous_parallel_sample``).

        With ``sample_async``, the next batch of the same size starts as this one returns:
        the runners sample it while the learner updates on this one, with the weights they
        have, one update older than the learner's (policy lag 1, as in Sample Factory's
        PPO; the loss's importance ratio is to the behaviour policy, which the batch
        records). The next call takes it."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] == max_env_steps:
            fragments = ahead[1].result()
        else:
            if ahead is not None:
                ahead[1].cancel()
            fragments = self.mesh.runners.sample(max_env_steps)
        if self.config.sample_async:
            self._ahead = (max_env_steps, self.mesh.runners.sample_ahead(max_env_steps))
        self.record(fragments)
        return fragments

    def drop_sample_ahead(self) -> None:
        """Forget the batch sampling ahead (``sample_async``): the weights it acts with are
        about to be replaced from outside training (restore, set_weights), or the run
        stops. The next ``sample`` starts afresh."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and not ahead[1].cancel():
            try:  # it finished: its steps were never counted, nor its error seen
                ahead[1].result(timeout=0)
            except Exception as exc:  # noqa: BLE001 (dropped with the batch)
                log.debug("a batch sampled ahead is dropped with its error: %s", exc)

    def record(self, fragments: list[dict[str, Any]]) -> None:
        """Count fragments (their episodes and env steps) into the iteration's result, each
        with its ``policy_lag``: the updates published since the weights it acted with (0
        sampling synchronously, 1 with ``sample_async``)."""
        for f in fragments:
            if "policy_version" in f:
                f["policy_lag"] = self.mesh.version - f["policy_version"]
        self.fragments.extend(fragments)
        self.env_steps += sum(int(f["env_steps"]) for f in fragments)

    def pop_sampled(self) -> tuple[list[dict[str, Any]], int]:
        out, steps = self.fragments, self.env_steps
        self.fragments, self.env_steps = [], 0
        return out, steps

    # --- weights ---

    def sync_weights(self, policies: list[str] | None = None,
                     to_worker_indices: list[int] | None = None) -> int:
        """Publish the learners' weights (of ``policies``, default all) to the param server,
        from which every runner takes them before its next fragment; the new version.

        With ``to_worker_indices``: send them straight to those runners only (A3C: the
        runner whose gradients were just applied), under a new version the param server
        does not hold, so the other runners act on with the weights they have."""
        if to_worker_indices is None:
            return self._algo.learner_group.publish(policies)
        weights = self._algo.learner_group.get_weights(policies)
        version = self.mesh.next_version()
        names = [self._runner(i) for i in to_worker_indices]
        self.mesh.runners.send_weights(names, version, weights)
        return version

    # --- reaching runners and envs ---

    def foreach_env_runner(self, fn: str | Callable[..., Any], *args: Any,
                           **kwargs: Any) -> list[Any]:
        """``fn(env_runner, *args, **kwargs)`` on every runner, ``fn`` a module-level
        function or its import path ``"pkg.module:fn"`` (or the name of an EnvRunner
        method); results in runner order."""
        return self._call(*runner_call(fn), *args, **kwargs)

    def foreach_env(self, fn: str | Callable[..., Any], *args: Any) -> list[Any]:
        """``fn(env, *args)`` on every env of every runner, the env as the user built it
        (their wrappers included): ``fn`` a function (see ``function_path``), its import
        path, or the name of a method of the env (``"set_phase"``, looked up on the
        outermost wrapper that has it: ``EnvRunner.call_env_method``)."""
        if callable(fn):
            fn = function_path(fn, "foreach_env function")
        named = ":" in fn or handed.is_token(fn)
        per_runner = self._call("foreach_env" if named else "call_env_method", fn, *args)
        return [r for runner in per_runner for r in runner]

    def _call(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        return self.mesh.runners.foreach(method, *args, **kwargs)

    # --- calls that run on while the driver goes on (A3C) ---

    def foreach_env_runner_async(self, fn: str | Callable[..., Any], *args: Any,
                                 **kwargs: Any) -> int:
        """Start ``fn`` (as ``foreach_env_runner`` takes it) on every healthy runner that
        has no call in flight, without waiting; the number started.
        ``fetch_ready_async_reqs`` collects the results."""
        self.mesh.runners.check()  # an env that kept crashing its runner: EnvCrashed
        method, *head = runner_call(fn)
        started = 0
        for name in self.mesh.runners.healthy_names():
            if name in self._in_flight:
                continue
            self._in_flight.start(name, [(method, (*head, *args), kwargs)])
            started += 1
        return started

    def fetch_ready_async_reqs(self, timeout_seconds: float | None = None
                               ) -> list[tuple[int, Any]]:
        """``(worker_index, result)`` of every call started by ``foreach_env_runner_async``
        that has finished, waiting up to ``timeout_seconds`` (None: as long as it takes)
        for the first. A call whose runner died (and is being restarted) is dropped with a
        warning; a call that raised raises here (``RemoteError``)."""
        self.mesh.runners.check()
        return [(worker_index_of(name), reply)
                for name, reply in self._in_flight.ready(timeout_seconds)]

    def _runner(self, worker_index: int) -> str:
        """The actor name of the runner with ``worker_index``."""
        for name in self.mesh.runners.names():
            if worker_index_of(name) == worker_index:
                return name
        raise KeyError(f"no env runner with worker_index {worker_index} (there are "
                       f"{sorted(worker_index_of(n) for n in self.mesh.runners.names())})")

    def num_healthy_env_runners(self) -> int:
        return self.mesh.runners.num_healthy()


def runner_call(fn: str | Callable[..., Any]) -> tuple[str, ...]:
    """The EnvRunner method (and its leading argument) that runs ``fn`` on a runner:
    ``apply`` with the import path (or token) of a function, else the method ``fn`` names."""
    if callable(fn):
        return ("apply", function_path(fn, "foreach_env_runner function"))
    return ("apply", fn) if ":" in fn or handed.is_token(fn) else (fn,)


def worker_index_of(runner_name: str) -> int:
    """The worker index of the runner actor named ``env_runner-<index>``."""
    return int(runner_name.rsplit("-", 1)[1])


def synchronous_parallel_sample(worker_set: EnvRunnerGroup, max_env_steps: int,
                                **_: Any) -> list[dict[str, Any]]:
    """RLlib's rollout op: sample from every env runner in parallel, round after round,
    until ``max_env_steps`` env steps; the fragments (each one policy's time-major
    columns). Their episodes and steps go into the iteration's result."""
    return worker_set.sample(max_env_steps)

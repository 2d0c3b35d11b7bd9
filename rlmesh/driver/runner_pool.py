"""The env runners as the driver asks things of them: sample rounds, a call on each, weights
past the param server, filter statistics, what streaming runners sampled, and which are up
(the mesh's supervisor events say who is down or given up on)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from typing import Any, Sequence

from rlmesh.driver.on_loop import blocking
from rlmesh.driver.pools import Pool
from rlmesh.driver.runner_faults import EnvCrashed
from rlmesh.runtime import ActorUnavailable, RemoteError

log = logging.getLogger(__name__)

RELAY_MARGIN_S = 5.0  # a relay's answer for its runners: their own timeout, and this


class SampleTimeout(RuntimeError):
    """No env runner delivered a fragment within ``sample_timeout_s`` (a hung env); the CLI
    prints it as one line."""


class RunnerPool(Pool):
    """The runners of ``mesh`` (kind ``runner``, named ``env_runner-<worker index>``); each
    public method is called from the driver's thread."""

    kind = "runner"

    def __init__(self, mesh: Any) -> None:
        super().__init__(mesh)
        self.config = mesh.config
        # Sampling rounds a runner missed (down, or died mid-call) since the driver last
        # asked: the shortfall the others made up for.
        self.fragments_missed = 0
        self._unavailable: dict[str, Exception] = {}  # why each runner last missed a round

    # --- who is up ---

    def healthy(self) -> list[Any]:
        """The runners up now: neither given up on nor being restarted."""
        return [r for r in self.handles if self.mesh.is_up(r.name)]

    def healthy_names(self) -> list[str]:
        return [r.name for r in self.healthy()]

    def num_live(self) -> int:
        """Runners not given up on (those being restarted included)."""
        return sum(not self.mesh.is_gone(r.name) for r in self.handles)

    def num_healthy(self) -> int:
        return len(self.healthy())

    def pop_fragments_missed(self) -> int:
        missed, self.fragments_missed = self.fragments_missed, 0
        return missed

    def check(self) -> None:
        """EnvCrashed once an env has taken its runner down too often (runner_faults.py)."""
        if self.mesh.runner_failure is not None:
            raise EnvCrashed(self.mesh.runner_failure)

    def unavailable(self, name: str, exc: ActorUnavailable, going_on: str) -> None:
        """A call to env runner ``name`` found it gone: an error when failed runners are not
        restarted, else a warning (it comes back; the run goes on meanwhile)."""
        self.check()
        if not self.config.restart_failed_env_runners:
            raise RuntimeError(f"env runner {name} failed: {exc}") from None
        # A death the supervisor has said in its own line: not a second one.
        log.log(logging.DEBUG if self.mesh.is_down(name) else logging.WARNING,
                "env runner %s unavailable (%s); %s", name, str(exc).splitlines()[0], going_on)

    # --- sampling ---

    def sample(self, target_steps: int) -> list[dict[str, Any]]:
        """Fragments from every healthy runner, round after round, until ``target_steps``
        env steps. A runner being restarted is left out (RLlib's semantics: the others fill
        the iteration); the rounds it missed are counted in ``fragments_missed``. Each
        runner acts with the newest published weights: one whose push has not arrived yet
        (it travels apart from the sample call, on the param server's socket) asks for them."""
        return self.loop.run(self._sample(target_steps, weights_up_to=self.mesh.version))

    def sample_ahead(self, target_steps: int) -> concurrent.futures.Future[list[dict[str, Any]]]:
        """``sample``, started now and not waited for, by runners that keep the weights
        version they hold now (a batch sampled ahead, ``EnvRunnerGroup.sample``)."""
        return self.loop.submit(self._sample(target_steps, weights_up_to=self.mesh.version))

    async def _sample(self, target_steps: int,
                      weights_up_to: int | None = None) -> list[dict[str, Any]]:
        fragments: list[dict[str, Any]] = []
        steps = 0
        deadline = None
        by = "agent_steps" if self.config.count_steps_by == "agent_steps" else "env_steps"
        while steps < target_steps:
            self.check()
            if not self.num_live():
                raise RuntimeError("every env runner is gone (see the log for why); "
                                   "the run cannot sample")
            got = await self._sample_round(self.healthy(), weights_up_to)
            if got:  # a round the others made: what the runners down or dying missed
                self.fragments_missed += self.num_live() - len(got)
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
            # A vector env's next-step reset rows fill the fragment as steps would: a batch
            # of envs x fragment length is one round, as on the one-env path.
            steps += sum(f.get(by, f["env_steps"]) + f.get("num_reset_rows", 0) for f in got)
            if all(f.get("idle") for f in got):
                break  # policy servers whose clients sent nothing in time: an idle iteration
        return fragments

    async def _sample_round(self, runners: list[Any],
                            weights_up_to: int | None = None) -> list[dict[str, Any]]:
        """One fragment from each of ``runners`` (those that answered)."""
        ask = {} if weights_up_to is None else {"weights_up_to": weights_up_to}
        got = await self._each(runners, "sample", self.config.sample_timeout_s, ask)
        fragments = []
        for runner, outcome in zip(runners, got):
            if isinstance(outcome, ActorUnavailable):
                self.unavailable(runner.name, outcome, "sampling with the others")
                self._unavailable[runner.name] = outcome
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                self.env_errors(runner.name, outcome)
                fragments.append(outcome)
        return fragments

    async def _each(self, runners: list[Any], method: str, timeout: float | None,
                    kwargs: dict[str, Any] | None = None) -> list[Any]:
        """``method(**kwargs)`` on each of ``runners`` at once; each reply or exception
        (ActorUnavailable, RemoteError) in their order. Runners a weight relay serves are
        asked through it (``call_runners``: one message per node, so the driver's messages
        grow with the nodes, not the runners); the others, and those of a relay that does
        not answer, directly."""
        kwargs = kwargs or {}
        out: list[Any] = [None] * len(runners)
        by_relay: dict[str, list[int]] = {}
        direct = []
        for i, runner in enumerate(runners):
            relay = self.mesh.relay_of(runner.name)
            (by_relay.setdefault(relay, []) if relay and self.mesh.is_up(relay) else direct).append(i)

        async def one(i: int) -> None:
            try:
                out[i] = await runners[i].call(method, timeout=timeout, **kwargs)
            except (ActorUnavailable, RemoteError) as exc:
                out[i] = exc

        async def via(relay: str, which: list[int]) -> None:
            handle = next(h for h in self.mesh.handles("relay") if h.name == relay)
            try:
                replies = await handle.call(
                    "call_runners", method, [], kwargs, timeout,
                    [runners[i].name for i in which],
                    timeout=None if timeout is None else timeout + RELAY_MARGIN_S)
            except (ActorUnavailable, RemoteError) as exc:
                log.debug("%s: %s; its runners asked directly", relay, str(exc).splitlines()[0])
                await asyncio.gather(*(one(i) for i in which))
                return
            for i, (name, status, value) in zip(which, replies):
                out[i] = (value if status == "ok" else
                          ActorUnavailable(f"{name}: {value}") if status == "unavailable" else
                          RemoteError(*_error_parts(value), actor=name))

        await asyncio.gather(*(one(i) for i in direct),
                             *(via(relay, which) for relay, which in by_relay.items()))
        return out

    def _sample_timeout_message(self, timeout: float | None) -> str:
        """One line for ``SampleTimeout``: which runners, which env, and the setting."""
        late = [n for n, e in self._unavailable.items() if "did not answer" in str(e)]
        who = ", ".join(late or sorted(self._unavailable) or self.names())
        env = self.config.env if isinstance(self.config.env, str) else type(self.config.env).__name__
        return (f"no env runner delivered a fragment for {timeout} s ({who}, env {env!r}): an "
                f"env's reset() or step() hangs, or takes longer than sample_timeout_s "
                f"({timeout}); fix the env, or raise sample_timeout_s for a slow one")

    def env_errors(self, runner: str, fragment: dict[str, Any]) -> None:
        """Count a runner's env errors; the first one's traceback shown once, here."""
        self.mesh.totals.add(runner, {"num_env_errors": fragment.pop("num_env_errors", 0)})
        if self.mesh.job is not None:  # its env steps, toward env_runner_crash_window
            self.mesh.job.supervisor.add_work(runner, int(fragment.get("env_steps", 0)))
        first = fragment.pop("env_error", None)
        if first is not None:
            log.warning("%s: %s(the env was recreated; the count of env errors is "
                        "num_env_errors in the results)", runner, first)

    @blocking
    async def pop_sampled(self) -> list[dict[str, Any]]:
        """Episodes and env steps of every reachable streaming runner since the last call."""
        runners = self.healthy()
        got = await self._each(runners, "pop_sampled", 10)
        out = []
        for runner, g in zip(runners, got):
            if isinstance(g, ActorUnavailable):
                continue  # restarting: its episodes come next time, or died with it
            if isinstance(g, BaseException):
                raise g
            self.mesh.totals.add(runner.name, {"num_fragments_lost": g["num_fragments_lost"]})
            self.env_errors(runner.name, g)
            g["runner"] = runner.name
            out.append(g)
        return out

    # --- calls on the runners ---

    @blocking
    async def foreach(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """``method(*args, **kwargs)`` on every healthy runner; the replies in runner order."""
        return list(await asyncio.gather(*(r.call(method, *args, **kwargs)
                                           for r in self.healthy())))

    def calls(self, name: str, calls: Sequence[tuple[str, tuple[Any, ...], dict[str, Any]]],
              timeout: float | None = None) -> concurrent.futures.Future[Any]:
        """Runner ``name``'s ``calls`` (``(method, args, kwargs)``), one after the other,
        started now and not waited for; the future of the last one's reply. Cancelling it
        cancels the call in flight."""
        runner = next(r for r in self.handles if r.name == name)

        async def in_turn() -> Any:
            reply = None
            for method, args, kwargs in calls:
                reply = await runner.call(method, *args, timeout=timeout, **kwargs)
            return reply

        return self.loop.submit(in_turn())

    @blocking
    async def send_weights(self, names: list[str], version: int,
                           weights: dict[str, dict[str, Any]]) -> None:
        """``weights`` (by policy id) straight to the runners ``names`` under ``version``,
        past the param server (A3C: the runner whose gradient was just applied). A runner
        restarting takes the param server's weights when it is back."""
        runners = [r for r in self.handles if r.name in names]
        for outcome in await asyncio.gather(*(r.call("set_weights", version, w, pid)
                                              for r in runners for pid, w in weights.items()),
                                            return_exceptions=True):
            if isinstance(outcome, ActorUnavailable) and self.config.restart_failed_env_runners:
                log.warning("weights not sent: %s", str(outcome).splitlines()[0])
            elif isinstance(outcome, BaseException):
                raise outcome

    @blocking
    async def sync_filters(self, obs_filter: Any) -> None:
        """Every runner's new observation statistics merged into ``obs_filter`` (the
        driver's global one), which then goes back to every runner. A runner gone meanwhile
        takes the global statistics at the next sync."""
        runners = self.healthy()
        updates = await self._on_each(runners, lambda r: r.call("get_filter_updates"),
                                      "its statistics wait")
        state = _merged(obs_filter, updates)
        await self._on_each(runners, lambda r: r.call("set_filter_state", state),
                            "it syncs when back")

    @blocking
    async def sync_connector_filters(self, global_stats: Any) -> None:
        """As ``sync_filters``, for the statistics of the runners' env-to-module connectors
        (``global_stats``: connectors/wiring.py's ConnectorFilterStats)."""
        runners = self.healthy()
        updates = await self._on_each(runners, lambda r: r.call("get_connector_filter_updates"),
                                      "its statistics wait")
        state = _merged(global_stats, updates)
        await self._on_each(runners, lambda r: r.call("set_connector_filter_state", state),
                            "it syncs when back")

    async def _on_each(self, runners: list[Any], call: Any, going_on: str) -> list[Any]:
        """``call(runner)`` on every runner at once; the replies of those that answered. A
        runner gone meanwhile is left out (``unavailable``, ``going_on``); any other error
        is raised."""
        got = await asyncio.gather(*(call(r) for r in runners), return_exceptions=True)
        for runner, outcome in zip(runners, got):
            if isinstance(outcome, ActorUnavailable):
                self.unavailable(runner.name, outcome, going_on)
            elif isinstance(outcome, BaseException):
                raise outcome
        return [g for g in got if not isinstance(g, BaseException)]


def _error_parts(text: Any) -> tuple[str, str]:
    """``(type, message)`` of a relay's ``"<type>: <message>"``."""
    etype, _, msg = str(text).partition(": ")
    return etype, msg


def _merged(stats: Any, updates: list[Any]) -> Any:
    """``updates`` (the runners' statistics since the last sync) merged into the driver's
    ``stats``; the merged state, which goes back to every runner."""
    for update in updates:
        stats.merge_buffer(update)
    return stats.get_state()

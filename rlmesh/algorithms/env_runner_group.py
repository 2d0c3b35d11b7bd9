"""The driver's view of the env runners (RLlib's EnvRunnerGroup): sample from all of them,
push the learners' weights to them, reach every runner or env with a module-level function
(sent by import path: nothing is pickled). What they sampled is counted here for results."""

from __future__ import annotations

from typing import Any, Callable

from rlmesh.envs import path_of


def function_path(fn: Callable[..., Any], what: str) -> str:
    """The import path of a module-level function, or a one-line error for a lambda or a
    nested function: functions cross processes by name, never pickled."""
    try:
        return path_of(fn, what)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{e} (rlmesh sends functions to env runners by import path, nothing "
                         "is pickled)") from None


class EnvRunnerGroup:
    """Every env runner of a run, and what they sampled since the last result."""

    def __init__(self, algo: Any) -> None:
        self._algo = algo
        self.mesh = algo.mesh
        self.fragments: list[dict[str, Any]] = []  # sampled since the last result, for metrics
        self.env_steps = 0

    # --- sampling ---

    def sample(self, max_env_steps: int) -> list[dict[str, Any]]:
        """Fragments from every healthy runner, round after round, until ``max_env_steps``
        env steps (see ``synchronous_parallel_sample``)."""
        fragments = self._algo._loop.run(self.mesh.sample(max_env_steps))
        self.record(fragments)
        return fragments

    def record(self, fragments: list[dict[str, Any]]) -> None:
        """Count fragments (their episodes and env steps) into the iteration's result."""
        self.fragments.extend(fragments)
        self.env_steps += sum(int(f["env_steps"]) for f in fragments)

    def pop_sampled(self) -> tuple[list[dict[str, Any]], int]:
        out, steps = self.fragments, self.env_steps
        self.fragments, self.env_steps = [], 0
        return out, steps

    # --- weights ---

    def sync_weights(self, policies: list[str] | None = None) -> int:
        """Publish the learners' weights (of ``policies``, default all) to the param server,
        from which every runner takes them before its next fragment; the new version."""
        return self._algo._publish(policies)

    # --- reaching runners and envs ---

    def foreach_env_runner(self, fn: str | Callable[..., Any], *args: Any,
                           **kwargs: Any) -> list[Any]:
        """``fn(env_runner, *args, **kwargs)`` on every runner, ``fn`` a module-level
        function (or the name of an EnvRunner method); results in runner order."""
        if callable(fn):
            path = function_path(fn, "foreach_env_runner function")
            return self._call("apply", path, *args, **kwargs)
        return self._call(fn, *args, **kwargs)

    def foreach_env(self, fn: str | Callable[..., Any], *args: Any) -> list[Any]:
        """``fn(env, *args)`` on every env of every runner: ``fn`` a module-level function
        or the name of a method of the env (``"set_phase"`` calls
        ``env.unwrapped.set_phase(*args)``)."""
        if callable(fn):
            per_runner = self._call("foreach_env", function_path(fn, "foreach_env function"), *args)
        else:
            per_runner = self._call("call_env_method", fn, *args)
        return [r for runner in per_runner for r in runner]

    def _call(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        return self._algo._loop.run(self.mesh.foreach_runner(method, *args, **kwargs))

    def num_healthy_env_runners(self) -> int:
        return self.mesh.num_healthy_runners()


def synchronous_parallel_sample(worker_set: EnvRunnerGroup, max_env_steps: int,
                                **_: Any) -> list[dict[str, Any]]:
    """RLlib's rollout op: sample from every env runner in parallel, round after round,
    until ``max_env_steps`` env steps; the fragments (each one policy's time-major
    columns). Their episodes and steps go into the iteration's result."""
    return worker_set.sample(max_env_steps)

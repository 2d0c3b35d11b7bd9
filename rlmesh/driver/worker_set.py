"""``algo.workers``: RLlib's Trainer-era WorkerSet (``local_worker()``, ``foreach_worker``,
``foreach_worker_with_index``) as a thin view over today's ``algo.env_runner_group``
(``EnvRunnerGroup``); functions reach the runners as ``foreach_env_runner`` sends them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from rlmesh.config.multi_agent import trainable
from rlmesh.driver.env_runner_group import function_path, worker_index_of
from rlmesh.rl.columns import DEFAULT_POLICY_ID
from rlmesh.runtime import RemoteError

if TYPE_CHECKING:
    from rlmesh.policy.policy import Policy


class WorkerError(RuntimeError):
    """A function given to ``foreach_worker`` raised in an env runner: one line naming the
    runner and the error; ``remote_traceback`` holds where it raised."""

    def __init__(self, message: str, remote_traceback: str = "") -> None:
        super().__init__(message)
        self.remote_traceback = remote_traceback


class LocalWorker:
    """What ``workers.local_worker()`` honestly is in rlmesh: the driver's copy of each
    policy, at the newest published weights (``algo.get_policy()``), which RLlib's local
    RolloutWorker also held. It steps no envs: the env runners do (``num_env_runners`` of
    them; with 0, one runner in the driver process), so ``foreach_env`` here reaches the
    in-process runner's envs when there is one and returns [] otherwise."""

    worker_index = 0

    def __init__(self, algo: Any) -> None:  # an Algorithm (it imports this module)
        self._algo = algo

    @property
    def policy_map(self) -> dict[str, Policy]:
        """Policy id -> the driver's copy (RLlib's ``policy_map``)."""
        return {pid: self._algo.get_policy(pid) for pid in self._algo.policy_specs}

    def get_policy(self, policy_id: str = DEFAULT_POLICY_ID) -> Policy:
        return self._algo.get_policy(policy_id)

    def get_weights(self, policies: list[str] | None = None) -> dict[str, dict[str, Any]]:
        return {pid: self.get_policy(pid).get_weights()
                for pid in (policies or list(self._algo.policy_specs))}

    def foreach_policy(self, fn: Callable[[Policy, str], Any]) -> list[Any]:
        return [fn(policy, pid) for pid, policy in self.policy_map.items()]

    def foreach_trainable_policy(self, fn: Callable[[Policy, str], Any]) -> list[Any]:
        """``fn(policy, policy_id)`` for each policy that learns (``policies_to_train``)."""
        return [fn(self.get_policy(pid), pid) for pid in trainable_ids(self._algo)]

    def foreach_env(self, fn: Callable[[Any], Any]) -> list[Any]:
        """``fn(env)`` for the envs this process steps: those of the in-process runner
        (``num_env_runners=0``), else none."""
        if self._algo.config.num_env_runners == 0:
            return self._algo.env_runners.foreach_env(fn)
        return []


class WorkerSet:
    """RLlib's ``trainer.workers``. ``foreach_worker(fn)`` runs ``fn(worker)`` on the local
    worker (the driver side, ``LocalWorker``) and then in each env runner process, where
    ``worker`` is that EnvRunner (``get_policy()``, ``policy_map``, ``foreach_env(fn)``
    with the envs as the user built them); the results come back as a list, local first.
    Each runner first loads the newest published weights, so a function run after
    ``train()`` sees the weights ``train()`` made. A lambda or closure reaches the runners
    of this machine through the spawn channel (runtime/handed.py); on a launched cluster
    it is one line asking for a module-level function. Results must be plain data (numbers,
    strings, lists, dicts, numpy arrays)."""

    def __init__(self, algo: Any) -> None:  # an Algorithm (it imports this module)
        self._algo = algo
        self._local = LocalWorker(algo)

    def local_worker(self) -> LocalWorker:
        return self._local

    def trainable_policies(self) -> list[str]:
        """The ids of the policies that learn (``policies_to_train``; all by default)."""
        return trainable_ids(self._algo)

    def remote_workers(self) -> list[str]:
        """The env runners' actor names (RLlib gave actor handles; rlmesh's runners are
        reached through ``foreach_worker``)."""
        return self._algo.mesh.runners.names() if self._algo.config.num_env_runners else []

    def num_remote_workers(self) -> int:
        return len(self.remote_workers())

    def foreach_worker(self, fn: Callable[[Any], Any]) -> list[Any]:
        """``[fn(local_worker), fn(runner 1), fn(runner 2), ...]``."""
        return self._run(fn, with_index=False)

    def foreach_worker_with_index(self, fn: Callable[[Any, int], Any]) -> list[Any]:
        """``[fn(local_worker, 0), fn(runner 1, 1), ...]``: each runner's worker index."""
        return self._run(fn, with_index=True)

    def sync_weights(self) -> int:
        """Publish the learners' weights to every runner; the new version."""
        return self._algo.env_runners.sync_weights()

    def _run(self, fn: Callable[..., Any], with_index: bool) -> list[Any]:
        if not callable(fn):
            raise TypeError(f"foreach_worker takes a function of the worker, got {fn!r}")
        local = []
        if self._algo.config.num_env_runners:  # with none, the in-process runner is local
            local = [fn(self._local, 0) if with_index else fn(self._local)]
        path = function_path(fn, "foreach_worker function")
        mesh = self._algo.mesh
        futures = [mesh.runners.calls(name, [("refresh_weights", (), {}),
                                            ("apply", (path, *([worker_index_of(name)]
                                                               if with_index else [])), {})])
                   for name in mesh.runners.healthy_names()]
        remote = []
        for future in futures:
            try:
                remote.append(future.result())
            except RemoteError as exc:
                for other in futures:
                    other.cancel()
                first = (exc.remote_msg.strip().splitlines() or [""])[0]
                raise WorkerError(f"the function given to foreach_worker raised in "
                                  f"{exc.actor or 'an env runner'}: {exc.etype}: {first}",
                                  exc.remote_traceback) from None
        return local + remote


def trainable_ids(algo: Any) -> list[str]:
    """The policy ids of ``algo`` that ``policies_to_train`` lets learn."""
    return [pid for pid in algo.policy_specs if trainable(algo.config, pid)]

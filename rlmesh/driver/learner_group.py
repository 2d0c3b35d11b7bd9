"""The driver's view of the learners (RLlib's LearnerGroup): one ``Learner`` in the driver
(``num_learners=0``) or learner actors, data-parallel when several, for synchronous and
asynchronous algorithms alike. Batches and weights are keyed by policy id."""

from __future__ import annotations

import math
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from rlmesh.rl.columns import merge_by_policy, shard_batch
from rlmesh.roles.learner import Learner

if TYPE_CHECKING:
    from rlmesh.config.base import AlgorithmConfig
    from rlmesh.driver.mesh import Mesh


class LearnerGroup:
    """Update, weights and state of every policy, wherever the learners run."""

    def __init__(self, config: AlgorithmConfig, policy_specs: dict[str, Any], mesh: Mesh) -> None:
        self.config = config
        self.policy_specs = policy_specs
        self.mesh = mesh
        self.local: Learner | None = None
        if config.num_learners == 0 and not mesh.asynchronous:
            from rlmesh.policy.device import learner_device

            # As a learner process would choose: no quiet fall-back to the CPU.
            device = learner_device(config.num_gpus_per_learner, 0, config.fake_gpus)
            self.local = Learner(config, policy_specs, str(device))
        self._pending: list[Future] = []
        self._executor: ThreadPoolExecutor | None = None  # async updates of the local learner

    def start(self) -> None:
        if self.local is None:
            self.mesh.start_learners(self.policy_specs)

    # --- updates ---

    @property
    def update(self) -> Callable[..., dict[str, dict[str, float]]]:
        """``update(batches, timesteps=, num_epochs=, minibatch_size=)``: one update of each
        policy from its batch (``{policy_id: time-major batch}``), statistics by policy id.
        With the learner in the driver this is that learner's own ``update_from_batch``
        (no frame of the group's between an algorithm's training_step and the policy's
        update); with learner actors, the remote update (data-parallel when several)."""
        if self.local is not None and not self._pending:
            return self.local.update_from_batch
        return self._update_everywhere

    def _update_everywhere(self, batches: dict[str, dict[str, Any]], timesteps: int = 0,
                           **kwargs: Any) -> dict[str, dict[str, float]]:
        if self.local is not None:  # after asynchronous updates: in order, on their thread
            return self.update_from_batch(batches, timesteps=timesteps, num_iters=kwargs.get(
                "num_epochs"), minibatch_size=kwargs.get("minibatch_size"))
        return self._update_remote(batches, timesteps, kwargs).result()

    def update_from_episodes(self, fragments: list[dict[str, Any]], **kwargs: Any
                             ) -> dict[str, dict[str, float]]:
        """Update from fragments as env runners ship them (merged per policy first)."""
        return self.update_from_batch(merge_by_policy(fragments), **kwargs)

    def update_from_batch(self, batch: dict[str, dict[str, Any]], *, timesteps: int = 0,
                          minibatch_size: int | None = None, num_iters: int | None = None,
                          async_update: bool = False) -> Any:
        """One update of each policy from its batch (``{policy_id: time-major batch}``):
        ``num_iters`` epochs (default ``num_epochs``) of ``minibatch_size`` minibatches
        (default the config's). Statistics by policy id; with ``async_update`` the update
        runs on while this returns the statistics of those finished since the last call
        (a list, maybe empty)."""
        kwargs = {"num_epochs": num_iters, "minibatch_size": minibatch_size}
        if self.local is not None:
            if not async_update and not self._pending:
                return self.local.update_from_batch(batch, timesteps, **kwargs)
            # One update at a time on the one model: a thread of its own, in order.
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="rlmesh.local-learner")
            future = self._executor.submit(self.local.update_from_batch, batch, timesteps, **kwargs)
            if not async_update:
                return future.result()
            self._pending.append(future)
            return self._finished()
        future = self._update_remote(batch, timesteps, kwargs)
        if not async_update:
            return future.result()
        self._pending.append(future)
        return self._finished()

    def stop(self) -> None:
        """Let the local learner's updates in flight finish (the actors stop with the job)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def _finished(self) -> list[dict[str, dict[str, float]]]:
        done = [f for f in self._pending if f.done()]
        self._pending = [f for f in self._pending if not f.done()]
        return [f.result() for f in done]

    def _update_remote(self, batch: dict[str, dict[str, Any]], timesteps: int,
                       kwargs: dict[str, Any]) -> Future[dict[str, dict[str, float]]]:
        """The update on the learner actors, started; the future of its statistics."""
        n = self.mesh.num_learners
        if n == 1:
            return _then(self.mesh.update_learners([(batch, timesteps)], kwargs),
                         lambda results: results[0])
        # Data-parallel: each rank a shard of every policy's batch, and every rank the same
        # number of minibatches, so their gradient all-reduces pair up.
        shards = {pid: shard_batch(b, n) for pid, b in batch.items()}
        size = kwargs.get("minibatch_size") or self.config.minibatch_size
        per_rank = [{pid: s[r] for pid, s in shards.items()} for r in range(n)]
        if size:
            most = max(int(np.asarray(s["mask"]).sum()) for s in
                       (x for shard in shards.values() for x in shard))
            kwargs = {**kwargs, "num_minibatches": max(1, math.ceil(most / size))}
        future = self.mesh.update_learners([(b, timesteps) for b in per_rank], kwargs)
        return _then(future, _rank_stats)

    def apply_gradients(self, gradients: dict[str, dict[str, Any]], *, timesteps: int = 0) -> None:
        """One optimizer step of each policy with the gradients given for it
        (``{policy_id: {parameter name: array}}``, as an env runner's
        ``sample_and_compute_gradients`` returns them), on every learner. ``timesteps``
        (env steps sampled so far) sets the learning rate of a schedule."""
        if self.local is not None:
            self.local.apply_gradients(gradients, timesteps)
        else:
            self.mesh.foreach_learner("apply_gradients", gradients, timesteps, timeout=None)

    # --- weights and state ---

    def publish(self, policy_ids: list[str] | None = None) -> int:
        """A new version of the weights of ``policy_ids`` (default all) to the param server,
        which pushes it to the runners; the version. Learner actors send theirs straight
        (rank 0): only the version comes back to the driver."""
        if self.local is not None:
            return self.mesh.publish(self.local.get_weights(policy_ids))
        return self.mesh.publish(policies=policy_ids)

    def get_weights(self, policy_ids: list[str] | None = None) -> dict[str, dict[str, np.ndarray]]:
        if self.local is not None:
            return self.local.get_weights(policy_ids)
        return self.mesh.call_learner("get_weights", policy_ids)

    def set_weights(self, weights: dict[str, dict[str, Any]]) -> None:
        if self.local is not None:
            self.local.set_weights(weights)
        else:
            self.mesh.foreach_learner("set_weights", weights)

    def get_state(self) -> dict[str, Any]:
        if self.local is not None:
            return self.local.get_state()
        return self.mesh.call_learner("get_state", timeout=120)

    def set_state(self, state: dict[str, Any]) -> None:
        if self.local is not None:
            self.local.set_state(state)
        else:
            self.mesh.foreach_learner("set_state", state, timeout=120)

    def foreach_learner(self, method: str, *args: Any) -> list[Any]:
        """``method(*args)`` on every learner actor (the local learner's attribute)."""
        if self.local is not None:
            return [getattr(self.local, method)(*args)]
        return self.mesh.foreach_learner(method, *args)


def _rank_stats(results: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Data-parallel ranks hold the same weights: rank 0's statistics stand for all, but for
    the samples trained on, which add up."""
    out = {pid: dict(stats) for pid, stats in results[0].items()}
    for pid, stats in out.items():
        stats["num_env_steps_trained"] = sum(r[pid].get("num_env_steps_trained", 0)
                                             for r in results)
    return out


def _then(future: Future[Any], fn: Callable[[Any], Any]) -> Future[Any]:
    """A future of ``fn(future's result)`` (its exception, if it raised)."""
    out: Future[Any] = Future()

    def done(f: Future[Any]) -> None:
        try:
            out.set_result(fn(f.result()))
        except BaseException as exc:  # noqa: BLE001 (handed to whoever waits)
            out.set_exception(exc)

    future.add_done_callback(done)
    return out

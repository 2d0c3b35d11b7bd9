"""The driver's view of the learners (RLlib's LearnerGroup): one ``Learner`` in the driver
(``num_learners=0``) or learner actors, data-parallel when several, for synchronous and
asynchronous algorithms alike. Batches and weights are keyed by policy id; RLlib's
``update_from_batch`` / ``update_from_episodes`` are the public update calls (docs/learner.md)."""

from __future__ import annotations

import math
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import torch

from rlmesh.rl.columns import shard_batch
from rlmesh.roles.learner import BOTH, Learner, deprecated_update, learner_class_of
from rlmesh.roles.thread_choice import ThreadChoice
from rlmesh.roles.train_data import checked_episodes, episode_batches, policy_batches, shard_episodes

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
        learner_class = learner_class_of(config)  # a bad learner_class: one line, here
        if config.num_learners == 0 and not mesh.asynchronous:
            from rlmesh.policy.device import learner_device

            # As a learner process would choose: no quiet fall-back to the CPU.
            device = learner_device(config.num_gpus_per_learner, 0, config.fake_gpus)
            self.local = learner_class(config, policy_specs, str(device))
            if device.type == "cpu":  # alone in the driver between its samples: its cores
                threads = config.learner_threads(in_driver=True)
                if threads > 1 and config.num_cpus_per_learner == "auto":
                    # faster on idle cores, far slower on busy ones: timed as it trains
                    self.local.thread_choice = ThreadChoice((1, threads))
                else:
                    torch.set_num_threads(threads)
        self._pending: list[Future] = []  # the learner actors' asynchronous updates

    def start(self) -> None:
        if self.local is None:
            self.mesh.build("learners")
        elif self.mesh.job is not None:  # an update far longer than usual is reported
            self.mesh.job.diagnostics.add_probe("learner (in the driver process)",
                                                self.local.update_clock.probe)

    # --- updates ---

    @property
    def update_from_batch(self) -> Callable[..., Any]:
        """``update_from_batch(batch, *, timesteps=0, async_update=False,
        minibatch_size=None, num_iters=None)``: one update of each policy from its batch;
        statistics by policy id. ``batch``: ``{policy_id: batch}``, a MultiAgentBatch, or one
        policy's columns (single-agent: ``default_policy``). ``num_iters`` passes (default
        the config's ``num_epochs``; ``num_epochs=`` is accepted too) of ``minibatch_size``
        minibatches (default the config's). ``async_update=True`` returns at once: a list
        of the statistics of the updates finished since the last call.

        With the learner in the driver this is that learner's own ``update_from_batch`` (no
        frame of the group's between an algorithm's training_step and the policy's update);
        with learner actors, the remote update (data-parallel when several)."""
        if self.local is not None:
            return self.local.update_from_batch
        return self._remote_update_from_batch

    def update_from_episodes(self, episodes: Any, *, timesteps: Any = 0,
                             async_update: bool = False, minibatch_size: int | None = None,
                             num_iters: int | None = None, num_epochs: int | None = None,
                             batch: Any = None) -> Any:
        """One update from ``episodes``: env runners' fragments (``synchronous_parallel_sample``)
        or finished episodes (``{column: per-step array}``), turned into each policy's batch on
        the learner, after its ``_preprocess_train_data`` and ``_postprocess_episodes``. The
        other arguments are ``update_from_batch``'s."""
        if self.local is not None:
            return self.local.update_from_episodes(
                episodes, timesteps, async_update=async_update, minibatch_size=minibatch_size,
                num_iters=num_iters, num_epochs=num_epochs, batch=batch)
        if batch is not None:
            raise ValueError(f"update_from_episodes got batch=: {BOTH}")
        options = {"num_epochs": _epochs(num_iters, num_epochs), "minibatch_size": minibatch_size}
        episodes = checked_episodes(episodes)
        n = len(self.mesh.learners)
        if n == 1:  # the learner turns them into batches itself
            future = _then(self.mesh.learners.update([(None, timesteps, episodes)], options),
                           lambda results: results[0])
        else:  # each rank its shard of every policy's batch, as fragments
            batches = policy_batches(episode_batches(episodes), self.policy_specs)
            per_rank = shard_episodes(batches, n)
            options = self._same_steps(options, per_rank)
            future = _then(self.mesh.learners.update(
                [(None, timesteps, eps) for eps in per_rank], options), _rank_stats)
        return self._started(future, async_update)

    def update(self, batch: Any = None, timesteps: Any = 0, *, episodes: Any = None,
               **kwargs: Any) -> Any:
        """RLlib's soft-deprecated ``update``: ``update_from_batch(batch)`` or
        ``update_from_episodes(episodes)`` (said once per process); ``num_epochs`` is
        ``num_iters``."""
        deprecated_update("LearnerGroup")
        if (batch is None) == (episodes is None):
            raise ValueError(f"update() takes one of batch= and episodes=: {BOTH}")
        if episodes is not None:
            return self.update_from_episodes(episodes, timesteps=timesteps, **kwargs)
        return self.update_from_batch(batch, timesteps=timesteps, **kwargs)

    def _remote_update_from_batch(self, batch: Any, timesteps: Any = 0, *,
                                  async_update: bool = False, minibatch_size: int | None = None,
                                  num_iters: int | None = None, num_epochs: int | None = None,
                                  episodes: Any = None) -> Any:
        if episodes is not None:
            raise ValueError(f"update_from_batch got episodes=: {BOTH}")
        # Plain dicts cross the wire (a SampleBatch is one, by another name).
        batches = {pid: dict(b) for pid, b in policy_batches(batch, self.policy_specs).items()}
        options = {"num_epochs": _epochs(num_iters, num_epochs), "minibatch_size": minibatch_size}
        return self._started(self._update_remote(batches, timesteps, options), async_update)

    def _started(self, future: Future[Any], async_update: bool) -> Any:
        """A synchronous update's statistics; or, with ``async_update``, those of the
        updates finished since the last call (the learner actors run them in order)."""
        if not async_update:
            return future.result()
        self._pending.append(future)
        done = [f for f in self._pending if f.done()]
        self._pending = [f for f in self._pending if not f.done()]
        return [f.result() for f in done]

    def stop(self) -> None:
        """Let the local learner's updates in flight finish (the actors stop with the job)."""
        if self.local is not None:
            self.local.stop()

    def _update_remote(self, batch: dict[str, dict[str, Any]], timesteps: Any,
                       kwargs: dict[str, Any]) -> Future[dict[str, dict[str, float]]]:
        """The update on the learner actors, started; the future of its statistics."""
        n = len(self.mesh.learners)
        if n == 1:
            return _then(self.mesh.learners.update([(batch, timesteps)], kwargs),
                         lambda results: results[0])
        # Data-parallel: each rank a shard of every policy's batch, and every rank the same
        # number of minibatches, so their gradient all-reduces pair up.
        shards = {pid: shard_batch(b, n) for pid, b in batch.items()}
        per_rank = [{pid: s[r] for pid, s in shards.items()} for r in range(n)]
        kwargs = self._same_steps(kwargs, [list(b.values()) for b in per_rank])
        future = self.mesh.learners.update([(b, timesteps) for b in per_rank], kwargs)
        return _then(future, _rank_stats)

    def _same_steps(self, kwargs: dict[str, Any], per_rank: list[list[dict[str, Any]]]
                    ) -> dict[str, Any]:
        """``kwargs`` with ``num_minibatches`` set so that every rank steps as often as the
        one with the most samples would."""
        size = kwargs.get("minibatch_size") or self.config.minibatch_size
        if not size:
            return kwargs
        most = max(int(np.asarray(b["mask"]).sum()) for shard in per_rank for b in shard)
        return {**kwargs, "num_minibatches": max(1, math.ceil(most / size))}

    def apply_gradients(self, gradients: dict[str, dict[str, Any]], *, timesteps: int = 0) -> None:
        """One optimizer step of each policy with the gradients given for it
        (``{policy_id: {parameter name: array}}``, as an env runner's
        ``sample_and_compute_gradients`` returns them), on every learner. ``timesteps``
        (env steps sampled so far) sets the learning rate of a schedule."""
        if self.local is not None:
            self.local.apply_gradients(gradients, timesteps)
        else:
            self.mesh.learners.foreach("apply_gradients", gradients, timesteps, timeout=None)

    # --- weights and state ---

    def publish(self, policy_ids: list[str] | None = None) -> int:
        """A new version of the weights of ``policy_ids`` (default all) to the param server,
        which pushes it to the runners (the driver's policy copies load it when next used:
        ``get_policy``); the version. Learner actors send theirs straight (rank 0): only the
        version comes back to the driver."""
        if self.local is not None:
            return self.mesh.param_server.publish(self.local.get_weights(policy_ids))
        return self.mesh.learners.publish(policy_ids)

    def get_weights(self, policy_ids: list[str] | None = None) -> dict[str, dict[str, np.ndarray]]:
        if self.local is not None:
            return self.local.get_weights(policy_ids)
        return self.mesh.learners.on_rank0("get_weights", policy_ids)

    def set_weights(self, weights: dict[str, dict[str, Any]]) -> None:
        if self.local is not None:
            self.local.set_weights(weights)
        else:
            self.mesh.learners.foreach("set_weights", weights)

    def get_state(self) -> dict[str, Any]:
        if self.local is not None:
            return self.local.get_state()
        return self.mesh.learners.on_rank0("get_state", timeout=120)

    def set_state(self, state: dict[str, Any]) -> None:
        if self.local is not None:
            self.local.set_state(state)
        else:
            self.mesh.learners.foreach("set_state", state, timeout=120)

    def foreach_learner(self, method: str, *args: Any) -> list[Any]:
        """``method(*args)`` on every learner actor (the local learner's attribute)."""
        if self.local is not None:
            return [getattr(self.local, method)(*args)]
        return self.mesh.learners.foreach(method, *args)


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


def _epochs(num_iters: int | None, num_epochs: int | None) -> int | None:
    """RLlib's ``num_iters``, or its newer name (and rlmesh's) ``num_epochs``."""
    return num_iters if num_iters is not None else num_epochs

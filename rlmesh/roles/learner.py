"""The learner (RLlib's ``Learner``, public as ``rlmesh.core.learner.Learner``): the policies
one learner process (or the driver) trains, by policy id, on its device. Each policy does its
own update (``Policy.update``); the learner routes batches to them, runs the hooks a user's
subclass overrides (learner_hooks.py), hands out weights and state, joins data-parallel peers.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rlmesh.callbacks import load_callbacks
from rlmesh.config.multi_agent import trainable
from rlmesh.policy.device_check import learner_scope
from rlmesh.policy.policy_spec import build_policy_from_data
from rlmesh.policy.torch_policy import TorchPolicy
from rlmesh.roles.learner_hooks import LearnerHooks, install_hooks
from rlmesh.roles.policy_changes import checked_policy_id, checked_settings, checked_spec, take_settings
from rlmesh.roles.thread_choice import ThreadChoice
from rlmesh.roles.train_data import episode_batches, policy_batches
from rlmesh.rl.finite import NonFiniteError, describe, first_nonfinite_column
from rlmesh.runtime.work_clock import WorkClock

if TYPE_CHECKING:
    from rlmesh.config.base import AlgorithmConfig
    from rlmesh.runtime.import_path import SentCode

log = logging.getLogger(__name__)

BOTH = ("pass either a batch (update_from_batch(batch)) or episodes "
        "(update_from_episodes(episodes)), not both")


class LearnerOutOfMemory(RuntimeError):
    """The device ran out of memory in an update; the message names the sizes to lower."""


class Learner(LearnerHooks):
    """``{policy_id: Policy}`` built from the specs' plain data (``PolicySpec.to_data``),
    trained by ``update_from_batch`` / ``update_from_episodes``. Subclass it (config key
    ``learner_class``) to override RLlib's hooks: ``compute_loss_for_module``,
    ``compute_gradients``, ``apply_gradients``, ``_preprocess_train_data``,
    ``_postprocess_episodes``, ``build`` (learner_hooks.py; docs/learner.md)."""

    def __init__(self, config: AlgorithmConfig, policy_specs: dict[str, dict[str, Any]],
                 device: str = "cpu", trust: SentCode | None = None) -> None:
        self.config = config
        # The code a message adding a policy may name (None: only this process calls).
        self.trust = trust
        self.main_script = None if trust is None else trust.main_script
        self.device = torch.device(device)
        # torch's default of a thread per core made an update of a small MLP 5-30x slower
        # on 2 cores (OpenMP threads spinning against the env runners and the event loop);
        # "auto" is one thread, as RLlib reserves one CPU per learner by default. The
        # driver's own learner may take more (LearnerGroup: learner_threads(in_driver)).
        torch.set_num_threads(config.learner_threads())
        self.policies: dict[str, Any] = {}
        self._init_hooks()
        for pid, spec in policy_specs.items():
            self.policies[pid] = self._built(pid, spec)
        self.callbacks = load_callbacks(config.callbacks_class)
        self.num_updates = 0
        # The driver's learner computing alone: its torch threads chosen by timing updates.
        self.thread_choice: ThreadChoice | None = None
        # How long updates take, for the heartbeat: one far longer than usual is reported
        # (stuck_learner_warn_s; the learner actor or LearnerGroup registers the probe).
        self.update_clock = WorkClock("update", config.stuck_learner_warn_s)
        self.num_nonfinite_batches_skipped = {pid: 0 for pid in self.policies}
        self._data_parallel = False
        self._dp: Any = None
        self.removed: set[str] = set()  # policies removed while training
        # Updates asked for with async_update: run in order on one thread of their own.
        self._executor: ThreadPoolExecutor | None = None
        self._pending: list[Future] = []
        self.learner_connector = self._build_learner_connector()
        self.build()

    def _build_learner_connector(self) -> Any:
        """RLlib's learner connector pipeline (``learner_connector``; connectors/wiring.py),
        its input spaces the first policy's; None unless configured."""
        if getattr(self.config, "learner_connector", None) is None or not self.policies:
            return None
        from rlmesh.connectors import wiring

        first = next(iter(self.policies.values()))
        return wiring.learner(self.config, getattr(first, "observation_space", None),
                              getattr(first, "action_space", None))

    def _built(self, pid: str, spec: dict[str, Any]) -> Any:
        extra = {"device": str(self.device)} if _is_torch_policy(spec) else {}  # theirs only
        policy = build_policy_from_data(spec, self.config, runner=False, **extra)
        if isinstance(policy, TorchPolicy):
            policy.for_learning()
            install_hooks(self, pid, policy)
        return policy

    # --- updates (RLlib's names) ---

    def update_from_batch(self, batch: Any, timesteps: Any = 0, *,
                          minibatch_size: int | None = None, num_iters: int | None = None,
                          async_update: bool = False, num_epochs: int | None = None,
                          num_minibatches: int | None = None, episodes: Any = None,
                          _queued: bool = False) -> Any:
        """One update of each policy that has a batch; statistics by policy id. ``batch``:
        ``{policy_id: batch}``, a MultiAgentBatch, or one policy's columns (single-agent:
        ``default_policy``); time-major as runners ship, or flat samples. ``num_iters``
        (RLlib's; ``num_epochs`` its newer name) passes of ``minibatch_size`` minibatches
        override the config's for this call. ``async_update``: queued on a thread, and the
        statistics of the updates finished since the last call come back (a list).

        The policy's ``update`` is called right here (the checks, callbacks and error
        translation around it are plain calls and ``with`` blocks): an algorithm's loss is
        two frames below this one."""
        if episodes is not None:
            raise ValueError(f"update_from_batch got episodes=: {BOTH}")
        epochs = num_iters if num_iters is not None else num_epochs
        kwargs = {"num_epochs": epochs, "minibatch_size": minibatch_size,
                  "num_minibatches": num_minibatches}
        if (async_update or self._pending) and not _queued:
            return self._queue(async_update, self.update_from_batch, batch, timesteps, **kwargs)
        if isinstance(batch, _Prepared):  # from update_from_episodes: preprocessed there
            batches = batch
        else:
            batches = policy_batches(batch, self.policies, self.removed)
            batches, _ = self._preprocess_train_data(batch=batches, episodes=None)
        if self.learner_connector is not None:  # before the losses, advantages included
            from rlmesh.connectors.wiring import run_learner_connector

            batches = run_learner_connector(self.learner_connector, batches, self.module,
                                            metrics=self.metrics)
        timesteps = _env_steps(timesteps)
        out = {}
        choice = getattr(self, "thread_choice", None)  # (a subclass may skip our __init__)
        started = choice.begin() if choice is not None else 0.0
        for pid, batch in batches.items():
            if not trainable(self.config, pid, self.main_script) or pid in self.removed:
                continue  # acts, never learns (policies_to_train); or sampled before removal
            policy = self.policy(pid)
            if not self._finite_batch(pid, batch):
                out[pid] = {"num_nonfinite_batches_skipped": self.num_nonfinite_batches_skipped[pid]}
                continue
            extra = kwargs if isinstance(policy, TorchPolicy) else {}
            added: dict[str, Any] = {}
            if self.callbacks is not None:
                self.callbacks.on_learn_on_batch(policy=policy, train_batch=batch, result=added)
            try:
                with (learner_scope(self.device, self.num_updates),
                      self.update_clock(f"update {self.num_updates + 1} of policy {pid!r}")):
                    stats = policy.update(batch, timesteps, **extra)
            except NonFiniteError as e:
                raise NonFiniteError(f"policy {pid!r}: {e}") from None
            except torch.OutOfMemoryError as e:
                raise LearnerOutOfMemory(self._out_of_memory(pid, batch, kwargs, e)) from e
            out[pid] = {**stats, **added, "num_nonfinite_batches_skipped": self.num_nonfinite_batches_skipped[pid]}
        if choice is not None:
            choice.end(started, sum(int(s.get("num_env_steps_trained", 0)) for s in out.values()))
        self.metrics_into(out)  # what the hooks logged in self.metrics
        self.num_updates += 1
        log.debug("update %d of %s", self.num_updates, ", ".join(
            f"{pid} ({s.get('num_env_steps_trained', '?')} samples)" for pid, s in out.items()))
        return out

    def update_from_episodes(self, episodes: Any, timesteps: Any = 0, *,
                             minibatch_size: int | None = None, num_iters: int | None = None,
                             async_update: bool = False, batch: Any = None,
                             _queued: bool = False, **kwargs: Any) -> Any:
        """One update from episodes: env runners' fragments, or finished episodes
        (``{column: per-step array}``; train_data.py). They go through
        ``_preprocess_train_data(batch=None, episodes=...)`` and ``_postprocess_episodes``,
        then become each policy's time-major batch, here on the learner. The other
        arguments are ``update_from_batch``'s."""
        if batch is not None:
            raise ValueError(f"update_from_episodes got batch=: {BOTH}")
        kwargs.update(minibatch_size=minibatch_size, num_iters=num_iters)
        if (async_update or self._pending) and not _queued:
            return self._queue(async_update, self.update_from_episodes, episodes, timesteps,
                               **kwargs)
        batch, episodes = self._preprocess_train_data(batch=None, episodes=episodes)
        if batch is None:
            batch = episode_batches(self._postprocess_episodes(episodes))
        batches = _Prepared(policy_batches(batch, self.policies, self.removed))
        return self.update_from_batch(batches, timesteps, _queued=True, **kwargs)

    def update(self, batch: Any = None, timesteps: Any = 0, *, episodes: Any = None,
               **kwargs: Any) -> Any:
        """RLlib's soft-deprecated ``update``: ``update_from_batch(batch)`` or
        ``update_from_episodes(episodes)`` (said once per process)."""
        deprecated_update("Learner")
        if (batch is None) == (episodes is None):
            raise ValueError(f"update() takes one of batch= and episodes=: {BOTH}")
        if episodes is not None:
            return self.update_from_episodes(episodes, timesteps, **kwargs)
        return self.update_from_batch(batch, timesteps, **kwargs)

    def _queue(self, async_update: bool, call: Any, *args: Any, **kwargs: Any) -> Any:
        """``call`` on the update thread, after the updates queued before it: its statistics
        (waited for), or with ``async_update`` those of the updates finished meanwhile."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="rlmesh.local-learner")
        future = self._executor.submit(call, *args, _queued=True, **kwargs)
        if not async_update:
            return future.result()
        self._pending.append(future)
        return self.finished_updates()

    def finished_updates(self) -> list[dict[str, dict[str, float]]]:
        """The statistics of the asynchronous updates finished since the last call, in the
        order they were asked for (an update's error is raised here)."""
        done = [f for f in self._pending if f.done()]
        self._pending = [f for f in self._pending if not f.done()]
        return [f.result() for f in done]

    def stop(self) -> None:
        """Let the updates in flight finish."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def _out_of_memory(self, pid: str, batch: dict[str, Any], kwargs: dict[str, Any],
                       error: BaseException) -> str:
        cfg = self.config
        minibatch = kwargs.get("minibatch_size") or getattr(cfg, "minibatch_size", None)
        return (f"{self.device} ran out of memory in policy {pid!r}'s update "
                f"(train_batch_size={getattr(cfg, 'train_batch_size', '?')}, "
                f"minibatch_size={minibatch}); lower minibatch_size (the memory of one "
                f"gradient step) or train_batch_size, or set _torch_autocast='bf16' "
                f"({str(error).splitlines()[0][:120]})")

    def _finite_batch(self, pid: str, batch: dict[str, Any]) -> bool:
        """False (counted, or NonFiniteError with on_nonfinite "raise") if the data in
        ``batch`` holds a NaN or inf: data that reached the learner from elsewhere (a policy
        client's chunks, a user's sampling code). Data-parallel ranks leave it to the update's
        own check, on the averaged gradient, so that all skip the same steps."""
        column = None if self._data_parallel else first_nonfinite_column(batch)
        if column is None:
            return True
        self.num_nonfinite_batches_skipped[pid] += 1
        if self.config.on_nonfinite != "skip":
            raise NonFiniteError(
                f"policy {pid!r}: the train batch's column {column!r} holds "
                f"{describe(batch[column])}; no update was made. Fix the data's source, or set "
                "on_nonfinite='skip' to drop such batches and count them")
        return False

    def policy(self, policy_id: str) -> Any:
        try:
            return self.policies[policy_id]
        except KeyError:
            raise KeyError(f"no policy {policy_id!r} on this learner (it has "
                           f"{sorted(self.policies)})") from None

    # --- policies added and removed while training (self-play) ---

    def add_policy(self, policy_id: str, spec: dict[str, Any], settings: dict[str, Any]) -> None:
        """Build policy ``policy_id`` from its spec data and take the new multi_agent
        ``settings`` (policies_to_train); data-parallel ranks each build it alike. Checked
        first (roles/policy_changes.py; the code under ``trust``): a refusal changes nothing."""
        checked_policy_id(policy_id, self.policies, exists=False)
        checked_spec(spec, self.config, self.trust, "policy_class")
        new = checked_settings(self.config, settings, self.trust, self.main_script)
        policy = self._built(policy_id, spec)
        if isinstance(policy, TorchPolicy) and self._dp is not None:
            self._dp.broadcast_module(policy.model)
            policy.data_parallel = self._dp
        self.policies[policy_id] = policy
        self.removed.discard(policy_id)
        self.num_nonfinite_batches_skipped[policy_id] = 0
        take_settings(self.config, new)

    def remove_policy(self, policy_id: str, settings: dict[str, Any]) -> None:
        """Drop policy ``policy_id`` (one this learner has) and take ``settings``; checked
        first, as ``add_policy``'s."""
        checked_policy_id(policy_id, self.policies, exists=True)
        new = checked_settings(self.config, settings, self.trust, self.main_script)
        self.policies.pop(policy_id)
        self.removed.add(policy_id)  # its fragments still in flight (IMPALA) are dropped
        self.num_nonfinite_batches_skipped.pop(policy_id, None)
        take_settings(self.config, new)

    def set_data_parallel(self, dp: Any) -> None:
        self._dp = dp
        self._data_parallel = True
        for policy in self.policies.values():
            if isinstance(policy, TorchPolicy):
                dp.broadcast_module(policy.model)
                policy.data_parallel = dp

    @property
    def num_env_steps_trained(self) -> int:
        return sum(getattr(p, "num_env_steps_trained", 0) for p in self.policies.values())

    # --- weights and state, by policy id ---

    def get_weights(self, policy_ids: list[str] | None = None) -> dict[str, dict[str, np.ndarray]]:
        return {pid: self.policy(pid).get_weights() for pid in policy_ids or self.policies}

    def set_weights(self, weights: dict[str, dict[str, Any]]) -> None:
        for pid, w in weights.items():
            self.policy(pid).set_weights(w)

    def get_state(self) -> dict[str, Any]:
        # Plain dicts: the state crosses a socket when the learner has a process of its own.
        return {"policies": {pid: p.get_state() for pid, p in self.policies.items()},
                "num_updates": self.num_updates}

    def set_state(self, state: dict[str, Any]) -> None:
        """Each policy's state from ``get_state``'s form; every policy id is checked to be
        one of this learner's first, so that a state naming another changes none."""
        for pid in state["policies"]:
            self.policy(pid)
        for pid, s in state["policies"].items():
            self.policy(pid).set_state(s)
        self.num_updates = int(state.get("num_updates", 0))


def _is_torch_policy(spec: dict[str, Any]) -> bool:
    from rlmesh.runtime.import_path import import_object

    cls = import_object(spec["policy_class"], "policy class")
    return isinstance(cls, type) and issubclass(cls, TorchPolicy)


class _Prepared(dict):
    """Batches by policy id that ``update_from_episodes`` made (and preprocessed) already."""


def _env_steps(timesteps: Any) -> int:
    """Env steps sampled so far: a count, or RLlib's newer ``{"num_env_steps_sampled_lifetime": n}``."""
    if isinstance(timesteps, dict):
        return int(timesteps.get("num_env_steps_sampled_lifetime", 0))
    return int(timesteps or 0)


_warned: set[str] = set()


def deprecated_update(who: str) -> None:
    """RLlib's soft deprecation of ``update()``: one warning per process."""
    if who not in _warned:
        _warned.add(who)
        log.warning("%s.update() is deprecated (as in RLlib): call update_from_batch(batch) "
                    "or update_from_episodes(episodes)", who)


def learner_class_of(config: AlgorithmConfig) -> type[Learner]:
    """The learner class ``config.learner_class`` names (a class or its import path; RLlib's
    ``_learner_class`` too), checked to be a ``Learner``; ``Learner`` where none is named."""
    from rlmesh.runtime.import_path import import_object

    named = getattr(config, "learner_class", None)
    if named is None:
        return Learner
    cls = import_object(named, "learner_class") if isinstance(named, str) else named
    if not (isinstance(cls, type) and issubclass(cls, Learner)):
        raise TypeError(f"learner_class {getattr(cls, '__name__', cls)!r} is not a Learner; "
                        "subclass rlmesh.core.learner.Learner (class MyLearner(Learner)) and "
                        "override its hooks, e.g. compute_loss_for_module (docs/learner.md)")
    return cls

"""The learner: the policies one learner process (or the driver) trains, by policy id, on its
device. Each policy does its own update (``Policy.update``); the learner routes batches to
them, hands out their weights and state, and joins them to data-parallel peers.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rlmesh.callbacks import load_callbacks
from rlmesh.config.multi_agent import trainable
from rlmesh.policy.device_check import learner_scope
from rlmesh.policy.policy_spec import build_policy_from_data
from rlmesh.policy.torch_policy import TorchPolicy
from rlmesh.roles.policy_changes import checked_policy_id, checked_settings, checked_spec, take_settings
from rlmesh.rl.finite import NonFiniteError, describe, first_nonfinite_column

if TYPE_CHECKING:
    from rlmesh.config.base import AlgorithmConfig
    from rlmesh.runtime.import_path import SentCode

log = logging.getLogger(__name__)


class LearnerOutOfMemory(RuntimeError):
    """The device ran out of memory in an update; the message names the sizes to lower."""


class Learner:
    """``{policy_id: Policy}`` built from the specs' plain data (``PolicySpec.to_data``)."""

    def __init__(self, config: AlgorithmConfig, policy_specs: dict[str, dict[str, Any]],
                 device: str = "cpu", trust: SentCode | None = None) -> None:
        self.config = config
        # The code a message adding a policy may name (None: only this process calls).
        self.trust = trust
        self.main_script = None if trust is None else trust.main_script
        self.device = torch.device(device)
        # torch's default of a thread per core made an update of a small MLP 5-30x slower
        # on 2 cores (OpenMP threads spinning against the env runners and the event loop);
        # "auto" is one thread, as RLlib reserves one CPU per learner by default.
        threads = config.num_cpus_per_learner
        torch.set_num_threads(1 if threads == "auto" else max(1, int(threads)))
        self.policies: dict[str, Any] = {}
        for pid, spec in policy_specs.items():
            extra = {"device": str(self.device)} if _is_torch_policy(spec) else {}  # theirs only
            policy = build_policy_from_data(spec, config, runner=False, **extra)
            if isinstance(policy, TorchPolicy):
                policy.for_learning()
            self.policies[pid] = policy
        self.callbacks = load_callbacks(config.callbacks_class)
        self.num_updates = 0
        self.num_nonfinite_batches_skipped = {pid: 0 for pid in self.policies}
        self._data_parallel = False
        self._dp: Any = None
        self.removed: set[str] = set()  # policies removed while training

    def update_from_batch(self, batches: dict[str, dict[str, Any]], timesteps: int = 0,
                          **kwargs: Any) -> dict[str, dict[str, float]]:
        """One update of each policy that has a batch; statistics by policy id. ``kwargs``
        (``num_epochs``, ``minibatch_size``, ``num_minibatches``) go to torch policies.
        The policy's ``update`` is called right here (the checks, callbacks and error
        translation around it are plain calls and ``with`` blocks): an algorithm's loss is
        two frames below this one."""
        out = {}
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
                with learner_scope(self.device, self.num_updates):
                    stats = policy.update(batch, timesteps, **extra)
            except NonFiniteError as e:
                raise NonFiniteError(f"policy {pid!r}: {e}") from None
            except torch.OutOfMemoryError as e:
                raise LearnerOutOfMemory(self._out_of_memory(pid, batch, kwargs, e)) from e
            out[pid] = {**stats, **added, "num_nonfinite_batches_skipped": self.num_nonfinite_batches_skipped[pid]}
        self.num_updates += 1
        log.debug("update %d of %s", self.num_updates, ", ".join(
            f"{pid} ({s.get('num_env_steps_trained', '?')} samples)" for pid, s in out.items()))
        return out

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

    def apply_gradients(self, gradients: dict[str, dict[str, Any]], timesteps: int) -> None:
        """One optimizer step of each policy with the gradients given for it (computed
        elsewhere: ``TorchPolicy.compute_gradients`` on an env runner)."""
        for pid, grads in gradients.items():
            policy = self.policy(pid)
            if not isinstance(policy, TorchPolicy):
                raise TypeError(f"policy {pid!r} ({type(policy).__name__}) has no "
                                "apply_gradients; gradients are for TorchPolicy subclasses")
            policy.global_timestep = timesteps
            with learner_scope(self.device, self.num_updates):
                policy.apply_gradients(grads)
        self.num_updates += 1

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
        extra = {"device": str(self.device)} if _is_torch_policy(spec) else {}
        policy = build_policy_from_data(spec, self.config, runner=False, **extra)
        if isinstance(policy, TorchPolicy):
            policy.for_learning()
            if self._dp is not None:
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

"""RLlib's Learner hooks on rlmesh's learner: what a user's ``Learner`` subclass overrides
(``compute_loss_for_module``, ``compute_gradients``, ``apply_gradients``,
``_preprocess_train_data``, ``_postprocess_episodes``, ``build``), and how an overridden one is
wired into each torch policy's own update (its minibatch loop, ``policy/sgd.py``), so there is
one update loop whether or not a subclass is in play. Only overridden hooks are wired."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Iterator

import numpy as np
import torch

from rlmesh.policy.device_check import learner_scope
from rlmesh.policy.module_model import module_of
from rlmesh.policy.recurrent import SEQ_MASK
from rlmesh.policy.torch_policy import TorchPolicy


class LearnerHooks:
    """The overridable part of ``Learner`` (``rlmesh.core.learner.Learner``): defaults that do
    what rlmesh's learner does without them. rlmesh steps each policy (RLlib: module) on its
    own, with its own optimizer and minibatches, so a hook is called per policy:
    ``loss_per_module`` and ``gradients`` hold one module's entry."""

    policies: dict[str, Any]
    device: torch.device
    num_updates: int

    def _init_hooks(self) -> None:
        self._own_loss: dict[str, Any] = {}  # each policy's loss, before a hook wraps it
        self._loss_stats: dict[str, dict[str, Any]] = {}
        self._steps: dict[str, tuple[Any, torch.Tensor, dict[str, Any]]] = {}  # in progress
        self._applied: dict[str, bool] = {}
        # RLlib's Learner.metrics: what a hook logs (self.metrics.log_value(...)), reduced
        # after each update into its statistics (metrics_into).
        from rlmesh.utils.metrics.metrics_logger import MetricsLogger

        self.metrics = MetricsLogger()

    def metrics_into(self, out: dict[str, dict[str, Any]]) -> None:
        """What the hooks logged in ``self.metrics`` into the update's statistics ``out``
        (numbers only): a key below a module id into that policy's, ``(module_id, "x")``
        as "x"; any other key (``ALL_MODULES``'s) into each updated policy's as
        "__all_modules__/<key>" (the driver's result["learners"][ALL_MODULES])."""
        if not self.metrics.stats or not out:
            return
        for path, value in _leaves(self.metrics.reduce(), ()):
            if not isinstance(value, (int, float)):
                continue
            if path[0] in self.policies and len(path) > 1:
                if path[0] in out:  # (a module not updated now reports with its next update)
                    out[path[0]]["/".join(map(str, path[1:]))] = value
            else:
                rest = path[1:] if path[0] == ALL_MODULES and len(path) > 1 else path
                for stats in out.values():
                    stats[f"{ALL_MODULES}/" + "/".join(map(str, rest))] = value

    def build(self) -> None:
        """Called once the policies are built (RLlib's ``Learner.build``): set up what the
        hooks need (extra parameters go in a policy's model to be trained and saved)."""

    @property
    def module(self) -> dict[str, torch.nn.Module]:
        """Each torch policy's model by policy id (RLlib's MultiRLModule:
        ``self.module[module_id].parameters()``)."""
        return {pid: module_of(p.model) or p.model for pid, p in self.policies.items()
                if isinstance(p, TorchPolicy)}

    def compute_loss_for_module(self, *, module_id: str, config: Any, batch: dict[str, Any],
                                fwd_out: Mapping[str, torch.Tensor]) -> Any:
        """The loss of policy ``module_id`` on one minibatch (``batch``: its train samples,
        as the policy's ``loss`` reads them, advantages and value targets included;
        ``config``: the policy's config; ``fwd_out``: the model's outputs on the minibatch,
        ``action_dist_inputs`` and ``vf_preds``, computed when first read). A scalar tensor,
        or ``(loss, {name: stat})`` to report more. By default the policy's own ``loss``
        (PPO's for PPO), whose statistics are reported; it runs its own forward pass."""
        loss, stats = self._own_loss[module_id](batch)
        self._loss_stats[module_id] = stats
        return loss

    def compute_gradients(self, loss_per_module: dict[str, torch.Tensor], **kwargs: Any
                          ) -> dict[str, dict[str, torch.Tensor]]:
        """Each module's gradients of its loss, ``{module_id: {parameter name: grad}}``:
        the optimizer's gradients zeroed, then ``loss.backward()``."""
        out = {}
        for pid, loss in loss_per_module.items():
            policy = self.policies[pid]
            policy.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            out[pid] = {name: p.grad for name, p in policy.model.named_parameters()
                        if p.grad is not None}
        return out

    def apply_gradients(self, gradients: dict[str, dict[str, Any]], timesteps: int | None = None
                        ) -> None:
        """One optimizer step of each module with ``gradients`` (``{module_id: {parameter
        name: grad}}``). In an update: the step's gradients, averaged over data-parallel
        learners, clipped (``grad_clip``) and checked for NaN/inf, as any step. Outside one
        (A3C: gradients computed on env runners): one step each, at ``timesteps`` env steps
        sampled (the learning-rate schedule)."""
        outside = False
        for pid, grads in gradients.items():
            policy = self.policies.get(pid)
            if not isinstance(policy, TorchPolicy):
                raise TypeError(f"apply_gradients: policy {pid!r} is "
                                f"{type(policy).__name__ if policy else 'not on this learner'}"
                                f"; gradients are for the torch policies {sorted(self.module)}")
            step = self._steps.get(pid)
            if step is None:
                outside = True
                if timesteps is not None:
                    policy.global_timestep = timesteps
                with learner_scope(self.device, self.num_updates):
                    policy.apply_gradients(grads)
                continue
            sgd, loss, stats = step
            params = dict(policy.model.named_parameters())
            for name, grad in grads.items():
                if name not in params:
                    raise KeyError(f"apply_gradients: policy {pid!r} has no parameter {name!r} "
                                   f"(it has {sorted(params)[:8]}...)")
                param = params[name]
                if grad is not param.grad:
                    param.grad = torch.as_tensor(np.array(grad) if isinstance(grad, np.ndarray)
                                                 else grad, device=param.device, dtype=param.dtype)
            self._applied[pid] = sgd.apply(stats, loss)
        if outside:
            self.num_updates += 1

    def _preprocess_train_data(self, *, batch: Any, episodes: Any) -> tuple[Any, Any]:
        """``(batch, episodes)`` as the update should train on them, before anything else
        (RLlib's name; one of the two is None): ``batch`` as ``{policy_id: columns}``,
        ``episodes`` as given to ``update_from_episodes``. Return a batch built from the
        episodes to skip rlmesh's own. By default unchanged."""
        return batch, episodes

    def _postprocess_episodes(self, episodes: Any) -> Any:
        """The episodes of ``update_from_episodes`` before they become each policy's batch
        (the name in RLlib's pull request). By default unchanged."""
        return episodes

    # --- wiring: a policy's loss and gradient step through the overridden hooks ---

    def _module_loss(self, pid: str, batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
        policy = self.policies[pid]
        self._loss_stats.pop(pid, None)
        out = self.compute_loss_for_module(module_id=pid, config=policy.config, batch=batch,
                                           fwd_out=ForwardOutputs(policy, batch))
        extra: dict[str, Any] = {}
        if isinstance(out, tuple):
            out, extra = out
        if not (isinstance(out, torch.Tensor) and out.numel() == 1):
            raise TypeError(f"compute_loss_for_module (policy {pid!r}) returned "
                            f"{type(out).__name__}; return a scalar torch tensor, or "
                            "(tensor, {name: stat})")
        return out, {**self._loss_stats.pop(pid, {}), **extra, "total_loss": out.detach()}

    def _gradient_step(self, pid: str, sgd: Any, loss: torch.Tensor, stats: dict[str, Any]) -> bool:
        self._steps[pid] = (sgd, loss, stats)
        try:
            self.apply_gradients(self.compute_gradients({pid: loss}))
            return self._applied.pop(pid, False)
        finally:
            self._steps.pop(pid, None)


def install_hooks(learner: LearnerHooks, pid: str, policy: TorchPolicy) -> None:
    """Route ``policy``'s loss through ``learner.compute_loss_for_module`` and its gradient
    steps through ``compute_gradients`` / ``apply_gradients``, where the learner's class
    overrides them; otherwise leave the policy as it is (no frame, no cost)."""
    cls = type(learner)
    learner._own_loss[pid] = policy.loss
    if cls.compute_loss_for_module is not LearnerHooks.compute_loss_for_module:
        policy.loss = functools.partial(learner._module_loss, pid)  # type: ignore[method-assign]
    if (cls.compute_gradients is not LearnerHooks.compute_gradients
            or cls.apply_gradients is not LearnerHooks.apply_gradients):
        policy.gradient_step = functools.partial(learner._gradient_step, pid)


class ForwardOutputs(Mapping):
    """RLlib's ``fwd_out``: the model's outputs on a minibatch (``policy.model_outputs``),
    ``action_dist_inputs`` and ``vf_preds``, computed when first read, with gradients."""

    def __init__(self, policy: TorchPolicy, batch: dict[str, Any]) -> None:
        self._policy, self._batch = policy, batch
        self._out: dict[str, torch.Tensor] | None = None

    def _outputs(self) -> dict[str, torch.Tensor]:
        if self._out is None and hasattr(self._policy.model, "train_outputs") and (
                SEQ_MASK not in self._batch):  # an RLModule: its forward_train's dict
            self._out = self._policy.model.train_outputs(self._batch["obs"])
        if self._out is None:
            out = self._policy.model_outputs(self._batch)
            self._out = ({"action_dist_inputs": out[0], "vf_preds": out[1]}
                         if isinstance(out, tuple) and len(out) == 2 else {"model_out": out})
        return self._out

    def __getitem__(self, key: str) -> torch.Tensor:
        return self._outputs()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._outputs())

    def __len__(self) -> int:
        return len(self._outputs())


ALL_MODULES = "__all_modules__"  # rlmesh.utils.metrics.ALL_MODULES


def _leaves(tree: dict, path: tuple) -> Iterator[tuple[tuple, Any]]:
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _leaves(value, path + (key,))
        else:
            yield path + (key,), value

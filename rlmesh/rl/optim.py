"""Adam and RMSprop for the learner, stepping all parameters as one flat tensor.

``torch.optim``'s optimizers import ``torch._dynamo`` on their first step (their ``step``
and ``zero_grad`` are wrapped to keep the compiler out), and that import took 1.2-1.8 s
and about 40 MB here, in a learner that never compiles: more than the rest of a PPO run's
first iteration. This is the same algorithm as ``torch.optim.Adam`` without weight decay,
amsgrad or the compiled paths (Kingma and Ba 2015, bias-corrected moments, ``eps`` added
to the corrected root of the second moment), and its ``state_dict`` has ``torch.optim.Adam``'s
layout, so either one loads the other's.

Both move their parameters into one contiguous buffer when built (``FlatParams``: each
parameter becomes a view of it), so a step is a handful of kernels over one tensor. With
torch's multi-tensor ops on CPU a step costs a handful of kernels per parameter: an Adam
step of the default two-trunk MLP (12 parameters) took about 250 us that way, a tenth of
an IMPALA update on CartPole.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import torch


class Adam:
    """``Adam(params, lr, betas, eps)``; ``param_groups[0]["lr"]`` may change between steps."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        self.params = list(params)
        if not self.params:
            raise ValueError("Adam got no parameters")
        self.param_groups = [{"params": self.params, "lr": float(lr), "betas": tuple(betas),
                              "eps": float(eps), "weight_decay": 0.0, "amsgrad": False,
                              "maximize": False}]
        self.steps = [0] * len(self.params)
        self.flat = FlatParams(self.params)
        self.exp_avg = self.flat.zeros()
        self.exp_avg_sq = self.flat.zeros()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        group = self.param_groups[0]
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        live = [i for i, p in enumerate(self.params) if p.grad is not None]
        # Parameters step together in the learner; any that sat out a step (no gradient)
        # keep a count of their own, as torch.optim.Adam keeps one per parameter.
        for count in sorted({self.steps[i] + 1 for i in live}):
            group_ix = [i for i in live if self.steps[i] + 1 == count]
            for i in group_ix:
                self.steps[i] = count
            # Per parameter: the fused kernel takes a list, and cat-ing the gradients into
            # the flat buffer's shape would cost more than the kernel itself.
            if _fused_adam([self.params[i] for i in group_ix],
                           [self.params[i].grad for i in group_ix],
                           [self.exp_avg[i] for i in group_ix],
                           [self.exp_avg_sq[i] for i in group_ix], count, lr, beta1, beta2, eps):
                continue
            params, grads, m, v = self.flat.operands(group_ix, self.exp_avg, self.exp_avg_sq)
            torch._foreach_lerp_(m, grads, 1 - beta1)
            torch._foreach_mul_(v, beta2)
            torch._foreach_addcmul_(v, grads, grads, 1 - beta2)
            bias1, bias2 = 1 - beta1 ** count, 1 - beta2 ** count
            denom = torch._foreach_sqrt(v)
            torch._foreach_div_(denom, math.sqrt(bias2))
            torch._foreach_add_(denom, eps)
            torch._foreach_addcdiv_(params, m, denom, value=-lr / bias1)

    def state_dict(self) -> dict[str, Any]:
        """``torch.optim.Adam``'s layout: per-parameter state by index, one param group."""
        state = {i: {"step": torch.tensor(float(self.steps[i])), "exp_avg": self.exp_avg[i].clone(),
                     "exp_avg_sq": self.exp_avg_sq[i].clone()}
                 for i in range(len(self.params)) if self.steps[i] > 0}
        group = {k: v for k, v in self.param_groups[0].items() if k != "params"}
        return {"state": state, "param_groups": [{**group, "params": list(range(len(self.params)))}]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved = _one_group(state_dict, self)
        for key in ("lr", "betas", "eps"):
            self.param_groups[0][key] = tuple(saved[key]) if key == "betas" else float(saved[key])
        for position, index in enumerate(saved["params"]):
            entry = state_dict["state"].get(index) or {}
            self.steps[position] = int(float(entry.get("step", 0)))
            for name, store in (("exp_avg", self.exp_avg), ("exp_avg_sq", self.exp_avg_sq)):
                _load_into(store[position], entry.get(name))


def _fused_adam(params: list[torch.Tensor], grads: list[torch.Tensor], m: list[torch.Tensor],
                v: list[torch.Tensor], count: int, lr: float, beta1: float, beta2: float,
                eps: float) -> bool:
    """The step above in torch's fused CPU kernel (torch >= 2.4): one pass over each tensor
    instead of seven; 0.22x the time for a [256, 256] Q network's 68k parameters.
    False where it cannot run (older torch, another device or dtype): the caller steps."""
    fused = getattr(torch, "_fused_adam_", None) if FUSED else None
    if fused is None or any(p.device.type != "cpu" or p.dtype not in FUSED_DTYPES for p in params):
        return False
    steps = [torch.tensor(float(count), device="cpu")] * len(params)  # the count, as given
    fused(params, grads, m, v, [], steps, lr=lr, beta1=beta1, beta2=beta2, weight_decay=0.0,
          eps=eps, amsgrad=False, maximize=False)
    return True


FUSED = True  # False: always the multi-tensor step (tests and benchmarks compare the two)
FUSED_DTYPES = (torch.float32, torch.float64)


def _one_group(state_dict: dict[str, Any], optimizer: Any) -> dict[str, Any]:
    """The one parameter group of a saved state, checked against ``optimizer``'s."""
    groups = state_dict["param_groups"]
    if len(groups) != 1 or len(groups[0]["params"]) != len(optimizer.params):
        raise ValueError(f"optimizer state for {[len(g['params']) for g in groups]} "
                         f"parameters in {len(groups)} group(s); this "
                         f"{type(optimizer).__name__} has one group of {len(optimizer.params)}")
    return groups[0]


class RMSprop:
    """``torch.optim.RMSprop``'s algorithm (not centered, no weight decay) without its
    ``torch._dynamo`` import, as ``Adam`` above; its ``state_dict`` has torch's layout.
    ``alpha`` is RLlib's ``decay``, ``eps`` its ``epsilon``."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float = 1e-2, alpha: float = 0.99,
                 eps: float = 1e-8, momentum: float = 0.0) -> None:
        self.params = list(params)
        if not self.params:
            raise ValueError("RMSprop got no parameters")
        self.param_groups = [{"params": self.params, "lr": float(lr), "alpha": float(alpha),
                              "eps": float(eps), "momentum": float(momentum), "centered": False,
                              "weight_decay": 0.0, "maximize": False}]
        self.steps = [0] * len(self.params)
        self.flat = FlatParams(self.params)
        self.square_avg = self.flat.zeros()
        self.momentum_buffer = self.flat.zeros()

    def zero_grad(self, set_to_none: bool = True) -> None:
        Adam.zero_grad(self, set_to_none)  # type: ignore[arg-type]

    @torch.no_grad()
    def step(self) -> None:
        group = self.param_groups[0]
        lr, alpha, eps, momentum = group["lr"], group["alpha"], group["eps"], group["momentum"]
        live = [i for i, p in enumerate(self.params) if p.grad is not None]
        if not live:
            return
        params, grads, square, buf = self.flat.operands(live, self.square_avg,
                                                        self.momentum_buffer)
        torch._foreach_mul_(square, alpha)
        torch._foreach_addcmul_(square, grads, grads, 1 - alpha)
        denom = torch._foreach_sqrt(square)
        torch._foreach_add_(denom, eps)
        if momentum > 0:
            torch._foreach_mul_(buf, momentum)
            torch._foreach_addcdiv_(buf, grads, denom)
            torch._foreach_add_(params, buf, alpha=-lr)
        else:
            torch._foreach_addcdiv_(params, grads, denom, value=-lr)
        for i in live:
            self.steps[i] += 1

    def state_dict(self) -> dict[str, Any]:
        state = {}
        for i in range(len(self.params)):
            if self.steps[i] == 0:
                continue
            entry = {"step": torch.tensor(float(self.steps[i])),
                     "square_avg": self.square_avg[i].clone()}
            if self.param_groups[0]["momentum"] > 0:
                entry["momentum_buffer"] = self.momentum_buffer[i].clone()
            state[i] = entry
        group = {k: v for k, v in self.param_groups[0].items() if k != "params"}
        return {"state": state, "param_groups": [{**group, "params": list(range(len(self.params)))}]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved = _one_group(state_dict, self)
        for key in ("lr", "alpha", "eps", "momentum"):
            self.param_groups[0][key] = float(saved[key])
        for position, index in enumerate(saved["params"]):
            entry = state_dict["state"].get(index) or {}
            self.steps[position] = int(float(entry.get("step", 0)))
            for name, store in (("square_avg", self.square_avg), ("momentum_buffer", self.momentum_buffer)):
                _load_into(store[position], entry.get(name))


def from_config(config: Any, params: Iterable[torch.Tensor], lr: float) -> Adam | RMSprop:
    """The optimizer a config's ``opt_type`` names (config/optimizer.py): RMSprop with its
    ``decay``, ``epsilon`` and ``momentum``, or Adam at torch's defaults."""
    if config.opt_type == "rmsprop":
        return RMSprop(params, lr=lr, alpha=config.decay, eps=config.epsilon,
                       momentum=config.momentum)
    return Adam(params, lr=lr)


class Optimizers:
    """Several optimizers stepped as one (a policy optimizer and a value optimizer).

    ``param_groups`` shows the first one's, so a learning-rate schedule drives the policy
    optimizer and the others keep their own rate."""

    def __init__(self, *optimizers: Any) -> None:
        self.optimizers = optimizers

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizers[0].param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.optimizers:
            opt.zero_grad(set_to_none)

    def step(self) -> None:
        for opt in self.optimizers:
            opt.step()

    def state_dict(self) -> dict[str, Any]:
        return {"optimizers": [opt.state_dict() for opt in self.optimizers]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved = state_dict.get("optimizers")
        if saved is None or len(saved) != len(self.optimizers):
            raise ValueError(f"optimizer state for {len(saved or [])} optimizers; this learner "
                             f"has {len(self.optimizers)}")
        for opt, state in zip(self.optimizers, saved):
            opt.load_state_dict(state)


class FlatParams:
    """Parameters moved into one contiguous buffer: each becomes a view of ``buffer``, so
    an optimizer can step all of them with one kernel per operation.

    Only parameters of one dtype and device, dense and not already views of each other,
    are moved; otherwise ``buffer`` is None and optimizers step them one by one. Whoever
    later gives a parameter new storage (``p.data = ...``, ``Module.to``) breaks the
    sharing; ``intact`` notices, and the step falls back to one tensor at a time.
    """

    def __init__(self, params: list[torch.Tensor]) -> None:
        self.params = params
        self.buffer: torch.Tensor | None = None
        self._numels = [p.numel() for p in params]
        if not self._movable(params):
            return
        with torch.no_grad():
            self.buffer = torch.cat([p.detach().reshape(-1) for p in params])
            for p, view in zip(params, self.views(self.buffer)):
                p.data = view
        self._pointers = [p.data_ptr() for p in params]

    @staticmethod
    def _movable(params: list[torch.Tensor]) -> bool:
        if not params:
            return False
        first = params[0]
        return (all(p.dtype == first.dtype and p.device == first.device and p.layout == torch.strided
                    for p in params)
                and len({p.untyped_storage().data_ptr() for p in params}) == len(params))

    def views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """``flat`` cut into tensors shaped as the parameters, in order."""
        return [chunk.view_as(p) for chunk, p in zip(flat.split(self._numels), self.params)]

    def zeros(self) -> "StateViews":
        """Per-parameter optimizer state of zeros: views of one flat buffer when the
        parameters are."""
        if self.buffer is None:
            return StateViews([torch.zeros_like(p) for p in self.params], None)
        flat = torch.zeros_like(self.buffer)
        return StateViews(self.views(flat), flat)

    def operands(self, ix: list[int], *states: "StateViews") -> list[list[torch.Tensor]]:
        """What a step over the parameters ``ix`` works on: ``[params, grads, *states]``,
        each a list of tensors; one flat tensor each when ``ix`` is every parameter and
        they still share the buffer (the usual step)."""
        if len(ix) == len(self.params) and self.intact():
            return [[self.buffer], [self.gradient()], *([s.flat] for s in states)]
        return [[self.params[i] for i in ix], [self.params[i].grad for i in ix],
                *([s[i] for i in ix] for s in states)]

    def intact(self) -> bool:
        return self.buffer is not None and all(
            p.data_ptr() == ptr for p, ptr in zip(self.params, self._pointers))

    def gradient(self) -> torch.Tensor:
        """Every parameter's gradient in one flat tensor (a copy)."""
        return torch.cat([p.grad.reshape(-1) for p in self.params])


class StateViews(list):
    """One tensor of optimizer state per parameter, views of ``flat`` (None when the
    parameters do not share a buffer)."""

    def __init__(self, tensors: list[torch.Tensor], flat: torch.Tensor | None) -> None:
        super().__init__(tensors)
        self.flat = flat


def _load_into(target: torch.Tensor, saved: torch.Tensor | None) -> None:
    """Saved optimizer state copied into ``target`` in place (a view, maybe), zeros when
    there is none."""
    with torch.no_grad():
        if saved is None:
            target.zero_()
        else:
            target.copy_(saved.to(target.device, target.dtype).view_as(target))

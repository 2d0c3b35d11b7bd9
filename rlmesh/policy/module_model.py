"""An RLModule as a policy's model: the spec as plain data (it crosses to runner and
learner processes), and ``ModuleModel``, which gives a module the contract every rlmesh
actor-critic policy calls (``forward(obs) -> (dist_inputs, value)``, ``policy_inputs``,
``values``, and ``get_initial_state`` / ``forward_seq`` for a stateful module; docs/models.md).

Runners act through ``forward_exploration`` (``forward_inference`` when not exploring: the
policy enters ``model.acting(explore)``), the learner trains through ``forward_train``.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any, Iterator

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlmesh.rl.columns import Columns

# --- the spec as plain data ---

_SPEC_KEYS = ("module_class", "observation_space", "action_space", "inference_only",
              "model_config", "load_state_path")


def spec_to_data(spec: Any) -> dict[str, Any] | None:
    """``config.rl_module(rl_module_spec=...)`` as JSON-able data: an RLModuleSpec (or its
    dict) -> ``{module_class, model_config, ...}`` (classes as import paths, spaces as data);
    a MultiRLModuleSpec -> ``{"rl_module_specs": {module_id: ...}}`` or ``{"shared": ...}``."""
    from rlmesh.models.rl_module import MultiRLModuleSpec
    from rlmesh.models.rl_module import RLModuleSpec

    if spec is None:
        return None
    if isinstance(spec, MultiRLModuleSpec):
        specs = spec.rl_module_specs
        if isinstance(specs, RLModuleSpec):
            return {"shared": _single(specs, spec)}
        return {"rl_module_specs": {str(mid): _single(s, spec) for mid, s in (specs or {}).items()}}
    if isinstance(spec, RLModuleSpec):
        return _single(spec, None)
    if isinstance(spec, dict):  # data already (a config dict round trip), checked
        if "rl_module_specs" in spec or "shared" in spec:
            return spec
        unknown = set(spec) - set(_SPEC_KEYS)
        if unknown:
            raise ValueError(f"rl_module_spec: unknown keys {sorted(unknown)}; an RLModuleSpec "
                             f"has {list(_SPEC_KEYS)}")
        return {**spec, "module_class": _class_path(spec.get("module_class"))}
    raise TypeError(f"expected an RLModuleSpec or a MultiRLModuleSpec "
                    f"(rlmesh.core.rl_module), got {type(spec).__name__}")


def _single(spec: Any, multi: Any) -> dict[str, Any]:
    from rlmesh.env.registry import as_space, space_to_data

    def space(value: Any, fallback: Any) -> Any:
        value = value if value is not None else fallback
        return None if value is None else space_to_data(as_space(value))

    model_config = spec.model_config
    if model_config is None and multi is not None and multi.model_config is not None:
        model_config = dict(multi.model_config)
    return {"module_class": _class_path(spec.module_class),
            "observation_space": space(spec.observation_space,
                                       getattr(multi, "observation_space", None)),
            "action_space": space(spec.action_space, getattr(multi, "action_space", None)),
            "inference_only": bool(spec.inference_only),
            "model_config": None if model_config is None else dict(model_config),
            "load_state_path": spec.load_state_path}


def _class_path(cls: Any) -> str | None:
    if cls is None or isinstance(cls, str):
        return cls
    if not isinstance(cls, type):
        raise TypeError(f"RLModuleSpec module_class must be a class (or its import path), "
                        f"got {cls!r}")
    from rlmesh.runtime.import_path import path_of

    return path_of(cls, "module_class")


def module_specs_by_policy(data: dict[str, Any], policy_ids: Any) -> dict[str, dict[str, Any]]:
    """A multi-module spec's single spec for each policy id (module id = policy id); one
    line naming the ids when the two do not match."""
    policy_ids = [str(p) for p in policy_ids]
    if "shared" in data:
        return {pid: dict(data["shared"]) for pid in policy_ids}
    if "rl_module_specs" not in data:
        return {pid: dict(data) for pid in policy_ids}
    specs = data["rl_module_specs"]
    unknown = sorted(set(specs) - set(policy_ids))
    if unknown:
        raise ValueError(f"MultiRLModuleSpec has modules {unknown} that are no policy of "
                         f"config.multi_agent(policies={sorted(policy_ids)}): a module id is a "
                         "policy id")
    return {pid: dict(specs[pid]) for pid in policy_ids if pid in specs}


def is_default_module(data: dict[str, Any] | None) -> bool:
    """Whether ``data`` names no module of the user's (none, or a default class of
    rlmesh/models/default_modules.py, without spaces of its own): the policy then builds
    its own default model, the numpy runner included."""
    from rlmesh.models.default_modules import DEFAULT_MODULE_PATHS

    if data is None:
        return True
    cls = data.get("module_class")
    return ((cls is None or cls in DEFAULT_MODULE_PATHS) and not data.get("observation_space")
            and not data.get("action_space") and not data.get("load_state_path"))


def policy_overrides(data: dict[str, Any] | None) -> dict[str, Any]:
    """The config settings one policy's single spec comes to: a user's module as
    ``module_spec``; a default one as its model_config in ``model`` (the keys rlmesh's
    model reads) and ``module_model_config`` (the others), and no module."""
    if not is_default_module(data):
        return {"module_spec": data}
    from rlmesh.rl.spec import MODEL_DEFAULTS

    model_config = (data or {}).get("model_config") or {}
    out: dict[str, Any] = {"module_spec": None}
    model = {k: v for k, v in model_config.items() if k in MODEL_DEFAULTS}
    rest = {k: v for k, v in model_config.items() if k not in MODEL_DEFAULTS}
    if model:
        out["model"] = model
    if rest:
        out["module_model_config"] = rest
    return out


def single_spec(data: dict[str, Any] | None, policy_id: str) -> dict[str, Any] | None:
    """The single spec of ``policy_id`` in ``data`` (a single spec is every policy's);
    None: the policy has no module of its own."""
    if data is None:
        return None
    if "shared" in data:
        return dict(data["shared"])
    if "rl_module_specs" in data:
        spec = data["rl_module_specs"].get(policy_id)
        return None if spec is None else dict(spec)
    return data


def modules_to_save(config: Any, policy_specs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each policy whose network is a user's RLModule: its spec as the module was built
    (spaces filled in, model_config merged), for the checkpoint's module dirs."""
    out = {}
    for pid, spec in policy_specs.items():
        overrides = spec.get("config") or {}
        data = (overrides["module_spec"] if "module_spec" in overrides
                else single_spec(getattr(config, "module_spec", None), pid))
        if is_default_module(data):
            continue
        policy_config = config
        if overrides:
            policy_config = config.copy()
            policy_config.update_from_dict(overrides)
        from rlmesh.runtime.import_path import import_object

        cls = import_object(spec["policy_class"], "policy class")
        base = (cls.module_model_config(policy_config) if hasattr(cls, "module_model_config")
                else dict(policy_config.model))
        out[pid] = {"module_class": data["module_class"],
                    "observation_space": data.get("observation_space") or spec["observation_space"],
                    "action_space": data.get("action_space") or spec["action_space"],
                    "model_config": {**base, **(data.get("model_config") or {})}}
    return out


# --- the module as a model ---

def torch_module_name(module: Any) -> str:
    """The module's class name; TypeError in one line when it is no torch module (the
    learner trains its parameters)."""
    name = type(module).__name__
    if not isinstance(module, nn.Module):
        raise TypeError(f"RLModule {name} is not a torch.nn.Module: subclass "
                        "rlmesh.core.rl_module.torch.TorchRLModule")
    return name


def build_module(data: dict[str, Any], obs_space: gym.Space, action_space: gym.Space,
                 model_config: dict[str, Any], default_class: Any) -> Any:
    """The module ``data`` describes, on the policy's spaces (a spec's own spaces win)."""
    from rlmesh.models.rl_module import RLModuleSpec
    from rlmesh.env.registry import space_from_data

    cls = data.get("module_class") or default_class
    if cls is None:
        raise ValueError("rl_module_spec gives no module_class and this algorithm has no "
                         "default RLModule")
    spec = RLModuleSpec(
        module_class=cls,
        observation_space=space_from_data(data["observation_space"])
        if data.get("observation_space") else obs_space,
        action_space=space_from_data(data["action_space"]) if data.get("action_space")
        else action_space,
        inference_only=False,
        model_config={**model_config, **(data.get("model_config") or {})})
    module = spec.build()
    if data.get("load_state_path"):
        _load_state(module, data["load_state_path"])
    return module


def _load_state(module: Any, path: str) -> None:
    """RLlib's ``load_state_path``: the module's weights from a checkpoint's module dir
    (``learner_group/learner/rl_module/<module_id>``, docs/new_api_stack.md)."""
    from rlmesh.policy.module_state import read_module_state

    module.set_state(read_module_state(path))


class ModuleModel(nn.Module):
    """rlmesh's actor-critic model contract around ``module`` (an RLModule that is a
    torch.nn.Module). ``needs_values``: the algorithm trains a value function, so the module
    must give ``Columns.VF_PREDS`` or define ``compute_values``."""

    use_prev_action = False
    use_prev_reward = False
    max_seq_len = 20  # model_config's max_seq_len (build_module_model)

    def __init__(self, module: Any, num_outputs: int, needs_values: bool = True) -> None:
        super().__init__()
        name = torch_module_name(module)
        self.module = module
        self.module_name = name
        self.num_outputs = num_outputs
        self.needs_values = needs_values
        initial = module.get_initial_state() if hasattr(module, "get_initial_state") else {}
        if initial is None:
            initial = {}
        if not isinstance(initial, dict):
            raise TypeError(f"{name}.get_initial_state() must return a dict of arrays (name -> "
                            f"state without the batch dim), got {type(initial).__name__}")
        self.state_keys = sorted(initial)
        self._initial = {k: np.asarray(_numpy(v), np.float32) for k, v in initial.items()}
        self.is_recurrent = bool(self.state_keys)
        self._mode: bool | None = None  # None: training; True: exploring; False: greedy
        self._values_take_embeddings = _takes_embeddings(getattr(module, "compute_values", None))

    # --- acting mode ---

    @contextlib.contextmanager
    def acting(self, explore: bool) -> Iterator[None]:
        """Forward passes inside are ``forward_exploration`` (``explore``) or
        ``forward_inference``; outside, ``forward_train``."""
        before, self._mode = self._mode, bool(explore)
        try:
            yield
        finally:
            self._mode = before

    def _run(self, batch: dict[str, Any]) -> dict[str, Any]:
        if self._mode is None:
            method = "forward_train"
        else:
            method = "forward_exploration" if self._mode else "forward_inference"
        out = getattr(self.module, method)(batch)
        if not isinstance(out, dict):
            raise TypeError(f"{self.module_name}.{_own(method)} returned "
                            f"{type(out).__name__}; return a dict with "
                            f"Columns.ACTION_DIST_INPUTS ({Columns.ACTION_DIST_INPUTS!r})")
        if Columns.ACTION_DIST_INPUTS not in out:
            raise KeyError(f"{self.module_name}.{_own(method)} returned no "
                           f"{Columns.ACTION_DIST_INPUTS!r} (Columns.ACTION_DIST_INPUTS), which "
                           f"the policy samples actions from; it returned {sorted(out)}")
        return out

    def _values(self, batch: dict[str, Any], out: dict[str, Any]) -> torch.Tensor:
        if Columns.VF_PREDS in out:
            return out[Columns.VF_PREDS]
        compute = getattr(self.module, "compute_values", None)
        if compute is None:
            raise KeyError(
                f"{self.module_name} gives no values, which this algorithm trains: return "
                f"{Columns.VF_PREDS!r} (Columns.VF_PREDS) from _forward_train, or define "
                "compute_values(batch, embeddings=None) (ValueFunctionAPI)")
        if self._values_take_embeddings:
            return compute(batch, embeddings=out.get(Columns.EMBEDDINGS))
        return compute(batch)

    # --- the feed-forward contract ---

    def forward(self, obs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        batch = {Columns.OBS: obs}
        out = self._run(batch)
        values = (self._values(batch, out) if self.needs_values
                  else torch.zeros(len(out[Columns.ACTION_DIST_INPUTS])))
        return out[Columns.ACTION_DIST_INPUTS], _per_row(values, obs)

    def train_outputs(self, obs: Any) -> dict[str, Any]:
        """``forward_train``'s whole output dict (a user's Learner reads it as ``fwd_out``),
        with the values under ``Columns.VF_PREDS`` where the algorithm trains them."""
        batch = {Columns.OBS: obs}
        out = dict(self._run(batch))
        if self.needs_values and Columns.VF_PREDS not in out:
            out[Columns.VF_PREDS] = _per_row(self._values(batch, out), obs)
        return out

    def policy_inputs(self, obs: Any) -> torch.Tensor:
        """What acting needs: the distribution inputs only."""
        return self._run({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]

    def values(self, obs: Any) -> torch.Tensor:
        """The values alone (GAE's pass over the batch)."""
        batch = {Columns.OBS: obs}
        compute = getattr(self.module, "compute_values", None)
        if compute is not None:
            return _per_row(compute(batch), obs)
        return _per_row(self._values(batch, self._run(batch)), obs)

    # --- the recurrent contract ---

    def get_initial_state(self) -> list[np.ndarray]:
        return [self._initial[k] for k in self.state_keys]

    def forward_seq(self, obs: Any, states: list[torch.Tensor], prev_actions: Any = None,
                    prev_rewards: Any = None) -> tuple[torch.Tensor, Any, list[torch.Tensor]]:
        """Sequences ``obs [B, T, ...]`` from ``states`` (each ``[B, ...]``) -> dist inputs
        ``[B, T, n]``, values ``[B, T]`` (None while acting) and the state after them."""
        batch = {Columns.OBS: obs, Columns.STATE_IN: dict(zip(self.state_keys, states))}
        out = self._run(batch)
        state_out = out.get(Columns.STATE_OUT)
        if not isinstance(state_out, dict) or set(state_out) != set(self.state_keys):
            got = sorted(state_out) if isinstance(state_out, dict) else type(state_out).__name__
            raise KeyError(f"{self.module_name} is stateful (get_initial_state has "
                           f"{self.state_keys}) but its {_own('forward_train' if self._mode is None else 'forward_exploration')} "
                           f"returned {Columns.STATE_OUT!r} {got}; return the next state as "
                           f"out[Columns.STATE_OUT] = {{{', '.join(map(repr, self.state_keys))}}}")
        values = None
        if self._mode is None:
            values = (self._values(batch, out) if self.needs_values
                      else torch.zeros(obs.shape[:2]))
        return (out[Columns.ACTION_DIST_INPUTS], values,
                [state_out[k] for k in self.state_keys])


def _per_row(values: torch.Tensor, obs: Any) -> torch.Tensor:
    """Values with one entry per observation row (``[N]``, or ``[T, B]`` for time-major
    observations): a trailing axis of 1 (``[N, 1]``) dropped."""
    if values.dim() > 1 and values.shape[-1] == 1:
        values = values.squeeze(-1)
    return values


def _own(method: str) -> str:
    """The method a user writes for a public forward pass."""
    return f"_{method}"


def _numpy(value: Any) -> Any:
    return value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value


def _takes_embeddings(fn: Any) -> bool:
    if fn is None:
        return False
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "embeddings" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def check_module_model(model: ModuleModel, obs_space: gym.Space) -> None:
    """The module's outputs checked on two sampled observations before any sampling: the
    keys the algorithm needs (one line naming the key and the method) and their shapes."""
    from rlmesh.rl.default_model import sample_obs_batch

    obs = sample_obs_batch(obs_space, 2)
    name, n = model.module_name, model.num_outputs
    with torch.no_grad():
        if model.is_recurrent:
            states = [torch.as_tensor(np.repeat(s[None], 2, 0)) for s in model.get_initial_state()]
            dist_inputs, values, _ = model.forward_seq(obs[:, None], states)
            dist_inputs, values = dist_inputs[:, 0], values[:, 0]
            for explore in (True, False):
                with model.acting(explore):
                    model.forward_seq(obs[:, None], states)
        else:
            dist_inputs, values = model(obs)
            _check_train_shapes(model, dist_inputs, values)
            for explore in (True, False):
                with model.acting(explore):
                    acted = model.policy_inputs(obs)
                    if tuple(acted.shape) != (2, n):
                        method = "_forward_exploration" if explore else "_forward_inference"
                        raise ValueError(
                            f"{name}.{method}: for 2 observations {Columns.ACTION_DIST_INPUTS!r} "
                            f"must have shape (2, {n}) (what the action space's distribution "
                            f"takes), got {tuple(acted.shape)}")
    _check_train_shapes(model, dist_inputs, values)


def _check_train_shapes(model: ModuleModel, dist_inputs: torch.Tensor, values: Any) -> None:
    name, n = model.module_name, model.num_outputs
    if tuple(dist_inputs.shape) != (2, n):
        raise ValueError(f"{name}._forward_train: for 2 observations "
                         f"{Columns.ACTION_DIST_INPUTS!r} must have shape (2, {n}) (what the "
                         f"action space's distribution takes), got {tuple(dist_inputs.shape)}")
    if model.needs_values and tuple(values.shape) != (2,):
        raise ValueError(f"{name}: for 2 observations the values ({Columns.VF_PREDS!r} or "
                         f"compute_values) must have 2 entries, got shape {tuple(values.shape)}")


def build_module_model(data: dict[str, Any], obs_space: gym.Space, action_space: gym.Space,
                       model_config: dict[str, Any], default_class: Any,
                       needs_values: bool = True) -> ModuleModel:
    """``data``'s module on these spaces, wrapped and checked."""
    from rlmesh.rl.distributions import distribution_for
    from rlmesh.rl.spec import check_model_config

    checked = check_model_config({k: v for k, v in model_config.items()
                                  if k in _model_defaults()})
    _, num_outputs = distribution_for(action_space, bool(checked["squash_actions"]))
    module = build_module(data, obs_space, action_space, model_config, default_class)
    model = ModuleModel(module, num_outputs, needs_values)
    model.max_seq_len = int(checked["max_seq_len"])  # a stateful module's training sequences
    check_module_model(model, obs_space)
    return model


def _model_defaults() -> dict[str, Any]:
    from rlmesh.rl.spec import MODEL_DEFAULTS

    return MODEL_DEFAULTS


def module_of(model: nn.Module) -> Any:
    """The RLModule inside a policy's model (None: the model is rlmesh's own)."""
    return model.module if isinstance(model, ModuleModel) else None


__all__ = ["ModuleModel", "build_module_model", "module_of", "spec_to_data"]

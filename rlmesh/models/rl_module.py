"""RLlib's ``ray.rllib.core.rl_module.rl_module``: ``RLModule`` (a network with the three
forward passes of RLlib's new API stack) and ``RLModuleSpec`` (how to build one); and its
``multi_rl_module``: ``MultiRLModule`` / ``MultiRLModuleSpec``, modules by module id, which in
rlmesh is a policy id (each policy gets the module of its id).

In rlmesh a module is one more way to give a policy its network, not a second stack: the
policy of the algorithm (PPO's, IMPALA's, ...) wraps the module (``rlmesh/rl/module_model.py``),
its runners act with ``forward_exploration`` / ``forward_inference`` and its learner trains
with ``forward_train``; checkpoints, weights broadcast and export are the policy's.
docs/new_api_stack.md says which of RLlib's idioms run and how.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterator

#: The module id of a single-agent run (RLlib's DEFAULT_MODULE_ID), rlmesh's policy id.
DEFAULT_MODULE_ID = "default_policy"


class RLModule:
    """A network and its three forward passes. Override ``setup`` (build the layers from
    ``self.observation_space``, ``self.action_space`` and ``self.model_config``) and
    ``_forward`` (or each of ``_forward_inference``, ``_forward_exploration``,
    ``_forward_train``): each takes a batch dict (``Columns.OBS`` -> ``[B, ...]``; a stateful
    module gets ``[B, T, ...]`` and ``Columns.STATE_IN``) and returns a dict with at least
    ``Columns.ACTION_DIST_INPUTS``. A stateful module returns its initial state (a dict of
    arrays without the batch dim) from ``get_initial_state`` and ``Columns.STATE_OUT``.
    """

    framework: str | None = None

    def __init__(self, config: Any = None, *, observation_space: Any = None,
                 action_space: Any = None, inference_only: bool | None = None,
                 learner_only: bool = False, model_config: dict | None = None,
                 catalog_class: Any = None, **kwargs: Any) -> None:
        if config is not None:  # RLlib's older RLModuleConfig / a spec passed positionally
            observation_space = observation_space or getattr(config, "observation_space", None)
            action_space = action_space or getattr(config, "action_space", None)
            model_config = model_config or (getattr(config, "model_config", None)
                                            or getattr(config, "model_config_dict", None))
            inference_only = (getattr(config, "inference_only", None)
                              if inference_only is None else inference_only)
        self.observation_space = observation_space
        self.action_space = action_space
        self.inference_only = bool(inference_only)
        self.learner_only = bool(learner_only)
        self.model_config = dict(model_config or {})
        self.catalog_class = catalog_class
        # RLlib builds layers through a Catalog; rlmesh's modules build their own.
        self.catalog = None
        self.setup()

    # --- to override ---

    def setup(self) -> None:
        """Build the module's layers (called once, from ``__init__``)."""

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        raise NotImplementedError(
            f"{type(self).__name__} defines no forward pass: override _forward(batch) (or "
            "_forward_inference, _forward_exploration and _forward_train) to return a dict "
            "with Columns.ACTION_DIST_INPUTS")

    def _forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._forward(batch, **kwargs)

    def _forward_exploration(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._forward(batch, **kwargs)

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._forward(batch, **kwargs)

    def get_initial_state(self) -> dict[str, Any]:
        """A stateful module's state before an episode's first step (a dict of arrays or
        tensors without the batch dim); ``{}``: the module keeps no state."""
        return {}

    # --- the public calls (RLlib's) ---

    def forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """Acting greedily (evaluation, ``compute_single_action(explore=False)``, serving)."""
        return self._forward_inference(batch, **kwargs)

    def forward_exploration(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """Acting while collecting training data."""
        return self._forward_exploration(batch, **kwargs)

    def forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """The learner's pass, whose outputs the loss reads."""
        if self.inference_only:
            raise RuntimeError(f"{type(self).__name__} was built inference_only: it cannot "
                               "run forward_train")
        return self._forward_train(batch, **kwargs)

    def is_stateful(self) -> bool:
        state = self.get_initial_state()
        return bool(state) if not hasattr(state, "__len__") else len(state) > 0

    def unwrapped(self) -> "RLModule":
        return self

    def as_multi_rl_module(self) -> Any:
        return MultiRLModule(rl_modules={DEFAULT_MODULE_ID: self})

    def get_state(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        pass

    @classmethod
    def from_checkpoint(cls, path: Any, **kwargs: Any) -> "RLModule":
        """The trained module of a checkpoint's module dir
        (``<checkpoint>/learner_group/learner/rl_module/<module_id>``), built without the
        algorithm; called on a subclass, that class is built."""
        from rlmesh.policy.module_state import load_module

        return load_module(path, None if cls in (RLModule,) or cls.__name__ == "TorchRLModule"
                           else cls)


@dataclasses.dataclass
class RLModuleSpec:
    """How to build one RLModule: its class, spaces (None: the env's, filled in by the
    algorithm) and ``model_config`` (given to the module as ``self.model_config``, over the
    algorithm's ``model_config`` defaults). ``module_class`` None: the algorithm's default
    module (PPO's ``DefaultPPOTorchRLModule``, ...)."""

    module_class: Any = None
    observation_space: Any = None
    action_space: Any = None
    inference_only: bool = False
    learner_only: bool = False
    model_config: dict | None = None
    catalog_class: Any = None
    load_state_path: str | None = None
    # RLlib's name before 2.10 for model_config; given, it is model_config.
    model_config_dict: dataclasses.InitVar[dict | None] = None

    def __post_init__(self, model_config_dict: dict | None) -> None:
        if model_config_dict is not None and self.model_config is None:
            self.model_config = dict(model_config_dict)
        if self.model_config is not None and hasattr(self.model_config, "__dataclass_fields__"):
            self.model_config = dataclasses.asdict(self.model_config)  # DefaultModelConfig
        if self.model_config is not None and not isinstance(self.model_config, dict):
            raise TypeError(f"RLModuleSpec model_config must be a dict, got "
                            f"{type(self.model_config).__name__}")

    def build(self) -> RLModule:
        """The module, built here (spaces must be set)."""
        if self.module_class is None:
            raise ValueError("RLModuleSpec.build(): module_class is None (the algorithm fills "
                             "in its default module only when the spec is given to "
                             "config.rl_module)")
        cls = self.module_class
        if isinstance(cls, str):
            from rlmesh.runtime.import_path import import_object

            cls = import_object(cls, "module_class")
        if self.observation_space is None or self.action_space is None:
            raise ValueError(f"RLModuleSpec.build(): {cls.__name__} needs observation_space "
                             "and action_space (the algorithm fills them in from the env)")
        return cls(observation_space=self.observation_space, action_space=self.action_space,
                   inference_only=self.inference_only, learner_only=self.learner_only,
                   model_config=dict(self.model_config or {}), catalog_class=self.catalog_class)

    def update(self, other: "RLModuleSpec", override: bool = True) -> None:
        """Fill this spec's fields from ``other`` (all of them, or only the unset ones)."""
        for f in dataclasses.fields(self):
            value = getattr(other, f.name)
            if value is not None and (override or getattr(self, f.name) is None):
                setattr(self, f.name, value)

    def as_multi_rl_module_spec(self) -> Any:
        return MultiRLModuleSpec(rl_module_specs={DEFAULT_MODULE_ID: self})


#: RLlib's names of the spec before 2.40.
SingleAgentRLModuleSpec = RLModuleSpec


class MultiRLModule(RLModule):
    """RLModules by module id; the forward passes take and return dicts by module id."""

    def __init__(self, config: Any = None, *, rl_modules: dict[str, RLModule] | None = None,
                 **kwargs: Any) -> None:
        self._rl_modules: dict[str, RLModule] = dict(rl_modules or {})
        super().__init__(config, **kwargs)

    def __getitem__(self, module_id: str) -> RLModule:
        if module_id not in self._rl_modules:
            raise KeyError(f"module {module_id!r} not in this MultiRLModule "
                           f"(it has {sorted(self._rl_modules)})")
        return self._rl_modules[module_id]

    def __contains__(self, module_id: str) -> bool:
        return module_id in self._rl_modules

    def __iter__(self) -> Iterator[str]:
        return iter(self._rl_modules)

    def __len__(self) -> int:
        return len(self._rl_modules)

    def keys(self) -> Any:
        return self._rl_modules.keys()

    def values(self) -> Any:
        return self._rl_modules.values()

    def items(self) -> Any:
        return self._rl_modules.items()

    def add_module(self, module_id: str, module: RLModule, *, override: bool = False) -> None:
        if module_id in self._rl_modules and not override:
            raise ValueError(f"module {module_id!r} is there already (override=True replaces it)")
        self._rl_modules[module_id] = module

    def remove_module(self, module_id: str, *, raise_err_if_not_found: bool = True) -> None:
        if module_id not in self._rl_modules:
            if raise_err_if_not_found:
                raise KeyError(f"module {module_id!r} not in this MultiRLModule")
            return
        del self._rl_modules[module_id]

    def foreach_module(self, func: Callable[..., Any], *, return_dict: bool = False) -> Any:
        out = {mid: func(mid, m) if _takes_two(func) else func(m)
               for mid, m in self._rl_modules.items()}
        return out if return_dict else list(out.values())

    def _each(self, method: str, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {mid: getattr(self._rl_modules[mid], method)(b, **kwargs)
                for mid, b in batch.items() if mid in self._rl_modules}

    def _forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._each("forward_inference", batch, **kwargs)

    def _forward_exploration(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._each("forward_exploration", batch, **kwargs)

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._each("forward_train", batch, **kwargs)

    def get_state(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return {mid: m.get_state() for mid, m in self._rl_modules.items()}

    def set_state(self, state: dict[str, Any]) -> None:
        for mid, s in state.items():
            if mid in self._rl_modules:
                self._rl_modules[mid].set_state(s)

    def as_multi_rl_module(self) -> "MultiRLModule":
        return self


def _takes_two(func: Callable[..., Any]) -> bool:
    import inspect

    try:
        inspect.signature(func).bind(None, None)
    except TypeError:
        return False
    return True


@dataclasses.dataclass
class MultiRLModuleSpec:
    """One RLModuleSpec per module id (= policy id). ``rl_module_specs`` a dict by module
    id, or one spec every module id of ``config.policies`` shares."""

    multi_rl_module_class: Any = MultiRLModule
    observation_space: Any = None
    action_space: Any = None
    inference_only: bool = False
    model_config: dict | None = None
    rl_module_specs: Any = None
    load_state_path: str | None = None
    modules_to_load: Any = None
    # RLlib's name before 2.40.
    module_specs: dataclasses.InitVar[Any] = None

    def __post_init__(self, module_specs: Any) -> None:
        if module_specs is not None and self.rl_module_specs is None:
            self.rl_module_specs = module_specs
        specs = self.rl_module_specs
        if specs is not None and not isinstance(specs, (dict, RLModuleSpec)):
            raise TypeError(f"MultiRLModuleSpec rl_module_specs must be a dict module_id -> "
                            f"RLModuleSpec (or one RLModuleSpec), got {type(specs).__name__}")
        for mid, spec in (specs.items() if isinstance(specs, dict) else []):
            if not isinstance(spec, RLModuleSpec):
                raise TypeError(f"MultiRLModuleSpec rl_module_specs[{mid!r}] must be an "
                                f"RLModuleSpec, got {type(spec).__name__}")

    def specs_for(self, module_ids: Any) -> dict[str, RLModuleSpec]:
        """The spec of each module id (a shared spec copied to each)."""
        specs = self.rl_module_specs
        if isinstance(specs, RLModuleSpec):
            return {str(mid): dataclasses.replace(specs) for mid in module_ids}
        return dict(specs or {})

    def build(self) -> MultiRLModule:
        specs = self.specs_for([])
        modules = {}
        for mid, spec in specs.items():
            spec = dataclasses.replace(spec)
            spec.observation_space = spec.observation_space or self.observation_space
            spec.action_space = spec.action_space or self.action_space
            if spec.model_config is None and self.model_config is not None:
                spec.model_config = dict(self.model_config)
            modules[mid] = spec.build()
        return self.multi_rl_module_class(rl_modules=modules)

    def add_modules(self, module_specs: dict[str, RLModuleSpec], override: bool = True) -> None:
        if self.rl_module_specs is None:
            self.rl_module_specs = {}
        for mid, spec in module_specs.items():
            if override or mid not in self.rl_module_specs:
                self.rl_module_specs[mid] = spec

    def remove_modules(self, module_ids: Any) -> None:
        for mid in [module_ids] if isinstance(module_ids, str) else module_ids:
            self.rl_module_specs.pop(mid, None)


#: RLlib's names before 2.40.
MultiAgentRLModule = MultiRLModule
MultiAgentRLModuleSpec = MultiRLModuleSpec

__all__ = ["DEFAULT_MODULE_ID", "MultiAgentRLModule", "MultiAgentRLModuleSpec", "MultiRLModule",
           "MultiRLModuleSpec", "RLModule", "RLModuleSpec", "SingleAgentRLModuleSpec"]

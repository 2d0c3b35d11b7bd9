"""RLlib's new-stack keys of the network: ``model_config`` (a dict, or RLlib's
``DefaultModelConfig``) and ``rl_module_spec`` (an RLModuleSpec or MultiRLModuleSpec), as
rlmesh's settings (``model``, ``module_model_config``, ``module_spec``;
docs/new_api_stack.md). Translations of rlmesh/config/rllib.py's table."""

from __future__ import annotations


class Refused(ValueError):
    """An RLlib key rlmesh cannot honour; the message names it and what to do (raised by
    rlmesh/config/rllib.py's translations, these included)."""


def _own_spellings(cls) -> set:
    from rlmesh.config.settings import _names

    return set(_names(cls))


def model_config(value, d, cls):
    """The new stack's ``model_config`` (a dict; DefaultModelConfig's fields) is ``model``;
    keys rlmesh's model does not read are kept for a user's RLModule (module_model_config),
    and are an error without one (the config's checks)."""
    if hasattr(value, "given"):  # DefaultModelConfig(...): the fields the user set
        value = value.given()
    elif hasattr(value, "__dataclass_fields__"):  # a dataclass of the user's own
        import dataclasses

        value = dataclasses.asdict(value)
    if not isinstance(value, dict):
        return {"model": value}, None
    from rlmesh.rl.spec import MODEL_DEFAULTS

    out = {"model": {k: v for k, v in value.items() if k in MODEL_DEFAULTS}}
    rest = {k: v for k, v in value.items() if k not in MODEL_DEFAULTS}
    if rest:
        out["module_model_config"] = rest
    return out, None


def rl_module_spec(value, d, cls):
    """RLlib's ``rl_module_spec`` as plain data (module_spec); the algorithm's default module
    class, or none, is the default model with the spec's model_config."""
    from rlmesh.policy.module_model import policy_overrides, spec_to_data

    try:
        data = spec_to_data(value)
    except (TypeError, ValueError) as e:
        raise Refused(f"rl_module_spec: {e}") from None
    if data is None or "rl_module_specs" in data or "shared" in data:
        return {"module_spec": data}, None
    _check_default_family(data, cls)
    out = policy_overrides(data)
    # a default module's model_config keys that are this algorithm's settings (DQN's
    # dueling, hiddens; SAC's twin_q) are those settings
    own = _own_spellings(cls)
    rest = out.get("module_model_config", {})
    for key in [k for k in rest if k in own]:
        out[key] = rest.pop(key)
    if "module_model_config" in out and not rest:
        del out["module_model_config"]
    return out, None


def _check_default_family(data: dict, cls) -> None:
    """Refused: one algorithm's default module given to another (PPO given DQN's would
    silently build PPO's own network)."""
    from rlmesh.models.default_modules import default_module_family

    family = default_module_family(data.get("module_class") or "")
    if family is None:
        return
    names = {c.__name__ for c in cls.__mro__}
    mine = "dqn" if "DQNConfig" in names else "sac" if "SACConfig" in names else "actor_critic"
    if family != mine:
        name = data["module_class"].rpartition(":")[2]
        raise Refused(f"rl_module_spec: {name} is the default module of "
                      f"{ {'dqn': 'DQN', 'sac': 'SAC', 'actor_critic': 'PPO, APPO and IMPALA'}[family]}, "
                      f"not of {cls.__name__.removesuffix('Config')}: leave module_class unset "
                      "for the algorithm's own, or give a module of your own")

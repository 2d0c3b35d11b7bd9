"""The run's policies by id, the driver's side of multi-agent runs: each policy id's spec
(spaces from the agents mapped to it), the mapping checked before any process starts,
per-policy results, and policies added or removed while training (self-play leagues)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from rlmesh.config.base import AlgorithmConfig
from rlmesh.config.multi_agent import mapping_function, policies_as_data
from rlmesh.config.settings import ConfigError
from rlmesh.env.multi_agent_env import is_multi_agent
from rlmesh.env.registry import EnvContext, env_registry, make_env
from rlmesh.policy.module_model import module_specs_by_policy, policy_overrides
from rlmesh.policy.policy_spec import PolicySpec
from rlmesh.rl.columns import DEFAULT_POLICY_ID
from rlmesh.roles.multi_agent_sampler import MultiAgentEpisode, map_agent

if TYPE_CHECKING:
    from rlmesh.driver.run_view import RunView


def probe(config: AlgorithmConfig) -> Any:
    """One env of the config, built to learn whether it is multi-agent (None: no env)."""
    if config.env is None:
        return None
    return make_env(config.to_dict()["env"],
                    EnvContext(config.env_config, 0, 0, config.num_env_runners), env_registry())


def multi_agent_specs(config: AlgorithmConfig, default_class: Any, env: Any) -> dict[str, dict[str, Any]]:
    """``{policy_id: spec data}`` of a multi-agent env: the config's policies (none: one
    default_policy), each on the spaces of the first agent mapped to it unless its spec
    gives them. A mapping to an unknown policy id is a one-line error here, at build()."""
    entries = policies_as_data(config.policies or _module_ids(config) or [DEFAULT_POLICY_ID])
    _give_modules(config, entries)
    mapping = mapping_function(config, entries)
    spaces: dict[str, tuple[Any, Any]] = {}
    episode = MultiAgentEpisode(0, 0)
    for aid in env.unwrapped.possible_agents:
        pid = map_agent(mapping, aid, episode, entries)
        spaces.setdefault(pid, (env.unwrapped.get_observation_space(aid),
                                env.unwrapped.get_action_space(aid)))
    out = {}
    for pid, data in entries.items():
        obs_space, act_space = spaces.get(pid, (None, None))
        spec = PolicySpec(data["policy_class"], data["observation_space"],
                          data["action_space"], data["config"])
        if (spec.observation_space or obs_space) is None or (spec.action_space or act_space) is None:
            raise ConfigError(f"policy {pid!r} has no spaces: no agent of the env maps to it "
                             "(possible_agents through policy_mapping_fn); give them in its "
                             "PolicySpec(observation_space=..., action_space=...)")
        out[pid] = spec.resolved(default_class, obs_space, act_space).to_data(config)
    return out


def _module_ids(config: AlgorithmConfig) -> list[str]:
    """The module ids of a MultiRLModuleSpec: the policies when the config names none."""
    data = config.module_spec
    return sorted(data["rl_module_specs"]) if data and "rl_module_specs" in data else []


def _give_modules(config: AlgorithmConfig, entries: dict[str, dict[str, Any]]) -> None:
    """Each policy's RLModule (module id = policy id) into its config overrides."""
    if config.module_spec is None:
        return
    try:
        specs = module_specs_by_policy(config.module_spec, entries)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    for pid, data in entries.items():
        data["config"] = {**data["config"], **policy_overrides(specs.get(pid))}


def specs_or_none(algo: RunView, default_class: Any) -> dict[str, dict[str, Any]] | None:
    """The multi-agent specs when the config's env is a MultiAgentEnv, else None."""
    if algo.config.policy_server_address is not None:
        return server_specs(algo.config, default_class) if algo.config.is_multi_agent else None
    env = probe(algo.config)
    try:
        if env is None or not is_multi_agent(env):
            if algo.config.is_multi_agent:
                raise ConfigError("multi_agent(policies=...) needs a MultiAgentEnv "
                                 "(rlmesh.env.MultiAgentEnv, or a PettingZoo env through "
                                 "rlmesh.env.ParallelPettingZooEnv / PettingZooEnv)")
            return None
        if not getattr(type(algo), "supports_multi_agent", True):
            raise ConfigError(f"{type(algo).__name__} does not run multi-agent envs yet; PPO, "
                             "IMPALA, APPO, PG, A2C and DQN do (docs/multi_agent.md)")
        if algo.config.observation_filter != "NoFilter":
            raise ConfigError("observation_filter: multi-agent runs take 'NoFilter' only")
        return multi_agent_specs(algo.config, default_class, env)
    finally:
        if env is not None:
            env.close()


def server_specs(config: AlgorithmConfig, default_class: Any) -> dict[str, dict[str, Any]]:
    """A multi-agent policy server's specs: the clients' simulators hold the env, so each
    policy's spaces come from its PolicySpec, else from ``.environment(observation_space=,
    action_space=)``."""
    spaces = (config.observation_space, config.action_space)
    out = {}
    for pid, data in policies_as_data(config.policies).items():
        spec = PolicySpec(data["policy_class"], data["observation_space"],
                          data["action_space"], data["config"])
        if (spec.observation_space or spaces[0]) is None or (spec.action_space or spaces[1]) is None:
            raise ConfigError(f"policy {pid!r} of a policy server has no spaces: give them in "
                             "its PolicySpec or in .environment(observation_space=..., "
                             "action_space=...)")
        out[pid] = spec.resolved(default_class, *spaces).to_data(config)
    return out


def policy_results(episodes: list[dict[str, Any]], new: list[dict[str, Any]],
                   fragments: list[dict[str, Any]]) -> dict[str, Any]:
    """RLlib's per-policy keys: ``policy_reward_mean/min/max`` (dicts by policy id, over
    the agent-episodes of the smoothing window), agent steps sampled, per-policy episodes."""
    by_policy: dict[str, list[float]] = {}
    for e in episodes:
        for _, pid, ret in e.get("agent_returns", ()):
            by_policy.setdefault(pid, []).append(ret)
    agent_steps = sum(int(f.get("agent_steps", 0)) for f in fragments)
    per_policy_new: dict[str, int] = {}
    for e in new:
        for _, pid, _ in e.get("agent_returns", ()):
            per_policy_new[pid] = per_policy_new.get(pid, 0) + 1
    return {"policy_reward_mean": {p: float(np.mean(r)) for p, r in by_policy.items()},
            "policy_reward_min": {p: float(np.min(r)) for p, r in by_policy.items()},
            "policy_reward_max": {p: float(np.max(r)) for p, r in by_policy.items()},
            "num_agent_steps_sampled_this_iter": agent_steps,
            "policy_episodes_this_iter": per_policy_new}


# --- policies added and removed while training ---

def _settings(config: AlgorithmConfig, policy_mapping_fn: Any, policies_to_train: Any) -> dict[str, Any]:
    """Apply new mapping/training settings to the driver's config; what the others take."""
    if policy_mapping_fn is not None or policies_to_train is not None:
        config.multi_agent(**{k: v for k, v in (("policy_mapping_fn", policy_mapping_fn),
                                                ("policies_to_train", policies_to_train))
                              if v is not None})
    data = config.to_dict()
    return {k: data[k] for k in ("policies", "policy_mapping_fn", "policies_to_train")}


def add_policy(algo: RunView, policy_id: str, policy_cls: Any = None, *,
               observation_space: Any = None, action_space: Any = None,
               config: dict[str, Any] | None = None, policy_state: dict[str, Any] | None = None,
               policy_mapping_fn: Any = None, policies_to_train: Any = None) -> dict[str, Any]:
    """Algorithm.add_policy: the new policy in the config, the learners and every runner,
    its state loaded (``policy_state``, e.g. ``get_policy("main").get_state()``); its spec
    as data (the algorithm keeps a driver copy and publishes its weights). Spaces default to
    those of the first policy."""
    from rlmesh.env.registry import space_from_data

    if policy_id in algo.policy_specs:
        raise ValueError(f"policy {policy_id!r} exists already (policies: {sorted(algo.policy_specs)})")
    first = next(iter(algo.policy_specs.values()))
    obs_space = observation_space or space_from_data(first["observation_space"])
    act_space = action_space or space_from_data(first["action_space"])
    default = algo.get_default_policy_class(algo.config)
    spec = PolicySpec(policy_cls, obs_space, act_space, dict(config or {})).resolved(
        default, obs_space, act_space)
    data = spec.to_data(algo.config)
    algo.config.policies = {**policies_as_data(algo.config.policies or list(algo.policy_specs)),
                            **policies_as_data({policy_id: spec})}
    settings = _settings(algo.config, policy_mapping_fn, policies_to_train)
    algo.policy_specs[policy_id] = data
    algo.learner_group.foreach_learner("add_policy", policy_id, data, settings)
    if policy_state is not None:
        algo.learner_group.set_state({"policies": {policy_id: policy_state},
                                      "num_updates": _num_updates(algo)})
    algo.mesh.runners.foreach("add_policy", policy_id, data, settings)
    return data


def remove_policy(algo: RunView, policy_id: str, *, policy_mapping_fn: Any = None,
                  policies_to_train: Any = None) -> None:
    """Algorithm.remove_policy: gone from runners (their episodes with it discarded),
    learners, the param server and the config (the algorithm drops its driver copy); give a
    mapping function that no longer names it."""
    if policy_id not in algo.policy_specs:
        raise KeyError(f"no policy {policy_id!r}; this algorithm has {sorted(algo.policy_specs)}")
    entries = policies_as_data(algo.config.policies or list(algo.policy_specs))
    entries.pop(policy_id, None)
    algo.config.policies = entries
    if isinstance(algo.config.policies_to_train, list):
        algo.config.policies_to_train = [p for p in algo.config.policies_to_train if p != policy_id]
    settings = _settings(algo.config, policy_mapping_fn, policies_to_train)
    algo.mesh.runners.foreach("remove_policy", policy_id, settings)
    algo.learner_group.foreach_learner("remove_policy", policy_id, settings)
    algo.mesh.param_server.remove_policy(policy_id)
    del algo.policy_specs[policy_id]


def _num_updates(algo: RunView) -> int:
    local = algo.learner_group.local
    return local.num_updates if local is not None else int(algo.learner_group.foreach_learner(
        "num_updates")[0])

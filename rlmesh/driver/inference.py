"""A checkpoint's policy for acting only, without a mesh: ``rlmesh rollout`` and ``rlmesh
serve`` load one straight from a checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rlmesh.config.base import AlgorithmConfig
from rlmesh.driver import checkpoints
from rlmesh.driver.checkpoint_kinds import check_kinds
from rlmesh.driver.acting import warn_without_state
from rlmesh.env.registry import actions_for_env, env_registry, spaces_of
from rlmesh.policy.policy_spec import PolicySpec, build_policy_from_data
from rlmesh.rl.columns import DEFAULT_POLICY_ID
from rlmesh.rl.filters import NoFilter, make_filter
from rlmesh.rl.nested_spaces import to_column


class InferencePolicy:
    """``compute_single_action`` of one policy of a checkpoint, at its saved weights."""

    def __init__(self, config: AlgorithmConfig, policy: Any, obs_filter: Any = None) -> None:
        self.config, self.policy = config, policy
        self.obs_space, self.action_space = policy.observation_space, policy.action_space
        self.obs_filter = obs_filter if obs_filter is not None else NoFilter()

    @classmethod
    def from_checkpoint(cls, path: str | Path, policy_id: str = DEFAULT_POLICY_ID,
                        trust_code: bool = False) -> "InferencePolicy":
        """Code the checkpoint names outside rlmesh needs ``trust_code`` (``--trust-code``)."""
        meta, state = checkpoints.read(Path(path), trust_code)
        check_kinds(Path(path), meta, ("algorithm", "policies"))
        algo_cls = checkpoints.algorithm_class(meta["algorithm"])
        try:
            config = algo_cls.config_class.from_dict(meta["config"])
        except ValueError as exc:  # ConfigError: another algorithm's config, an edited one
            raise checkpoints.CheckpointError(
                f"{path}: its config is not a valid {meta['algorithm']} config "
                f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None
        specs = meta.get("policies")
        if specs is None:  # format version 1: the algorithm's default policy on the env's spaces
            obs_space, action_space = spaces_of(meta["config"]["env"], config.env_config,
                                                env_registry())
            spec = PolicySpec(config.policy_class).resolved(
                algo_cls.get_default_policy_class(config), obs_space, action_space)
            specs = {DEFAULT_POLICY_ID: spec.to_data(config)}
        if policy_id == DEFAULT_POLICY_ID and policy_id not in specs and cls is InferencePolicy:
            return MultiAgentInference(config, {  # type: ignore[return-value]
                pid: cls.from_checkpoint(path, pid, trust_code) for pid in specs})
        if policy_id not in specs:
            raise checkpoints.CheckpointError(f"{path} has no policy {policy_id!r} (it has "
                                              f"{sorted(specs)})")
        policy = build_policy_from_data(specs[policy_id], config, runner=False)
        checkpoints.load_policy(Path(path), policy, state, policy_id, meta["algorithm"])
        obs_filter = make_filter(config.observation_filter, policy.observation_space)
        obs_filter.set_state(meta.get("filters", {}).get(policy_id))
        return cls(config, policy, obs_filter)

    def compute_single_action(self, observation: Any, state: list[Any] | None = None,
                              explore: bool = False, prev_action: Any = None,
                              prev_reward: Any = None) -> Any:
        """As ``Algorithm.compute_single_action``: the action, or with ``state`` (a
        recurrent policy) ``(action, state_out, extra)``; a recurrent policy asked without
        ``state`` warns once (``acting.warn_without_state``)."""
        if state is None and self.policy.is_recurrent():
            warn_without_state(self, DEFAULT_POLICY_ID, stacklevel=2)
        _, _, action, state_out, extra = self.compute_step(observation, state, explore,
                                                           prev_action, prev_reward)
        return (action, state_out, extra) if state is not None else action

    def compute_step(self, observation: Any, state: list[Any] | None = None,
                     explore: bool = False, prev_action: Any = None, prev_reward: Any = None
                     ) -> tuple[np.ndarray, np.ndarray, Any, list[Any], dict[str, Any]]:
        """One step as a runner records it: ``(obs, action, env_action, state_out, extra)``,
        obs (filtered) and action (as the policy gave it) in their column form, env_action
        as the env takes it (rescaled or clipped)."""
        # Nested (Tuple/Dict) observations go as they are: MeanStdFilter takes Box ones only.
        obs = self.obs_filter(observation, update=False)
        action, state_out, extra = self.policy.compute_single_action(
            obs, state, prev_action, prev_reward, explore=explore)
        return (to_column(self.obs_space, obs), to_column(self.action_space, action, "action"),
                env_action(self.config, self.action_space, action), state_out, extra)

    def obs_column(self, observation: Any) -> np.ndarray:
        """An env observation as ``compute_step`` records it (filtered, column form)."""
        return to_column(self.obs_space, self.obs_filter(observation, update=False))

    def get_policy(self) -> Any:
        return self.policy

    def stop(self) -> None:
        """Nothing to stop (the same call as an Algorithm's, for code that takes either)."""


class MultiAgentInference:
    """A multi-agent checkpoint's policies for acting: ``compute_single_action(obs,
    policy_id=...)`` and, per agent, ``compute_actions_for(obs_dict, episode)`` through the
    checkpoint's policy_mapping_fn."""

    def __init__(self, config: AlgorithmConfig, policies: dict[str, InferencePolicy]) -> None:
        from rlmesh.config.multi_agent import mapping_function

        self.config, self.policies = config, policies
        self.mapping_fn = mapping_function(config, policies)

    def compute_single_action(self, observation: Any, state: list[Any] | None = None,
                              explore: bool = False, policy_id: str = DEFAULT_POLICY_ID,
                              **kwargs: Any) -> Any:
        return self.policies[policy_id].compute_single_action(observation, state, explore, **kwargs)

    def get_policy(self, policy_id: str = DEFAULT_POLICY_ID) -> Any:
        return self.policies[policy_id].policy

    def stop(self) -> None:
        """Nothing to stop."""


def env_action(config: AlgorithmConfig, action_space: Any, action: Any) -> Any:
    """A policy's action as the env takes it: a Python int for Discrete, Box actions
    rescaled or clipped as the env runners do (squashed ones are in the bounds already)."""
    if isinstance(action, (dict, tuple)):  # a Tuple/Dict space's, unpacked already
        action = to_column(action_space, action, "action")
    elif np.ndim(action) == 0 and np.issubdtype(np.asarray(action).dtype, np.integer):
        return int(action)
    squash = bool(config.model.get("squash_actions", False))
    return actions_for_env(action, action_space, config.normalize_actions and not squash,
                           config.clip_actions)

"""Which sampler an env runner steps its envs with, chosen by what its envs are (a small
function of: a vector env, C++ Atari or any gymnasium VectorEnv? a MultiAgentEnv?), and each
kind's extras: the observation filter and reward normalizer of gymnasium envs, the policies
of a multi-agent sampler."""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym

from rlmesh.env.gym_vector import gym_vector_maker
from rlmesh.env.multi_agent_env import is_multi_agent
from rlmesh.env.vector import double_buffered, vector_maker
from rlmesh.rl.filters import ReturnNormalizer, make_filter
from rlmesh.roles.env_sampler import EnvSampler
from rlmesh.roles.multi_agent_sampler import MultiAgentSampler, bind_policies
from rlmesh.roles.vector_sampler import VectorEnvSampler


def sampler_kind(vector: bool, multi_agent: bool) -> str:
    """"vector" (a vector env: C++ Atari or a gymnasium VectorEnv), "multi_agent" (a
    MultiAgentEnv) or "env" (gymnasium envs, one agent)."""
    return "vector" if vector else "multi_agent" if multi_agent else "env"


def make_sampler(runner: Any, create: Callable[[int], Any], registry: dict[str, str],
                 seeds: list[int | None], vector_env: bool, central: bool) -> tuple[str, Any]:
    """``(kind, sampler)`` of ``runner``'s ``num_envs_per_env_runner`` envs (``create(i)``
    builds env i; ``vector_env``: the runner may step a C++ vector env; ``central``: its
    actions come from the inference actor, ``runner._central_act``)."""
    cfg = runner.config
    n = cfg.num_envs_per_env_runner
    atari = vector_maker(cfg, registry) if vector_env else None
    vector = atari or (gym_vector_maker(cfg, registry) if vector_env else None)
    connected = has_connectors(cfg)
    if vector is not None and connected:
        asked = (cfg.env_config or {}).get("vector", "auto") if isinstance(cfg.env_config, dict) else "auto"
        if atari is not None or asked != "auto":
            raise ValueError("env_to_module_connector / module_to_env_connector: connectors run "
                             "on runners stepping gymnasium envs one at a time; drop "
                             f"env_config vector={asked!r} (or the Atari vector env) to use them")
        vector = None  # "auto" picked a vector env: stepped one env at a time instead
    if vector is not None:
        sampler = VectorEnvSampler(
            vector, n, splits=2 if double_buffered(cfg, True, central) else 1, seed=seeds[0],
            callbacks=runner.callbacks, env_runner=runner, clip_rewards=cfg.clip_rewards,
            act=runner._central_act if central else None,
            normalize_actions=cfg.normalize_actions and not cfg.model.get("squash_actions", False),
            clip_actions=cfg.clip_actions, noise_hold=cfg.noise_hold_steps)
        sampler.episodes_listed = cfg.metrics_num_episodes_for_smoothing
        if atari is None:  # frames are not filtered (observation_filter refused for Atari)
            sampler.obs_filter = make_filter(cfg.observation_filter, sampler.observation_space)
            if rewards_normalized(cfg, sampler.action_space):
                sampler.reward_normalizer = ReturnNormalizer(n, cfg.gamma)
        return "vector", sampler
    double_buffered(cfg, vector=False)  # True asked without a vector env: one line
    first = [create(0)]  # built once to tell its kind, then handed out as env 0
    kind = sampler_kind(False, is_multi_agent(first[0]))

    def make(i: int) -> Any:
        return first.pop() if i == 0 and first else create(i)

    cls = MultiAgentSampler if kind == "multi_agent" else EnvSampler
    hold = cfg.noise_hold_steps
    if cls is MultiAgentSampler and hold > 1:
        raise ValueError(f"noise_hold_steps={hold}: held noise is drawn for single-agent envs "
                         "so far; a MultiAgentEnv's runner draws fresh noise each step (set 1)")
    # Squashed actions are in the bounds already: stepped as drawn, never rescaled.
    sampler = cls(make, n, seeds=seeds, callbacks=runner.callbacks, env_runner=runner,
                  normalize_actions=cfg.normalize_actions and not cfg.model.get("squash_actions", False),
                  clip_actions=cfg.clip_actions, clip_rewards=cfg.clip_rewards,
                  on_nonfinite=cfg.on_nonfinite,
                  **({} if cls is MultiAgentSampler else {"noise_hold": hold}))
    if connected and kind != "env":
        raise ValueError("env_to_module_connector / module_to_env_connector: a MultiAgentEnv's "
                         "runner does not run connectors yet; map observations inside the env")
    if connected:
        sampler.use_connectors(runner_connectors(cfg, sampler))
    if kind == "env":
        sampler.obs_filter = make_filter(cfg.observation_filter, sampler.observation_space)
        if rewards_normalized(cfg, sampler.action_space):
            sampler.reward_normalizer = ReturnNormalizer(n, cfg.gamma)
    return kind, sampler


def rewards_normalized(cfg: Any, action_space: gym.Space) -> bool:
    """``normalize_rewards`` for a runner whose envs act in ``action_space``: 'auto' (PPO's
    default) is on for Box actions, as CleanRL's continuous-action PPO normalizes and its
    discrete one does not, and only where rlmesh implements it (the callers: gymnasium envs,
    one agent; elsewhere 'auto' stays off without a word)."""
    if cfg.normalize_rewards == "auto":
        return isinstance(action_space, gym.spaces.Box)
    return bool(cfg.normalize_rewards)


def has_connectors(cfg: Any) -> bool:
    return (getattr(cfg, "env_to_module_connector", None) is not None
            or getattr(cfg, "module_to_env_connector", None) is not None)


def runner_connectors(cfg: Any, sampler: Any) -> Any:
    """The runner's env-to-module and module-to-env pipelines (connectors/wiring.py),
    built by the config's factories with the runner's first env."""
    from rlmesh.connectors import wiring

    env = sampler.slots[0].env
    obs_space, act_space = sampler.observation_space, sampler.action_space
    return wiring.RunnerConnectors(wiring.env_to_module(cfg, env, obs_space, act_space),
                                   wiring.module_to_env(cfg, env, obs_space, act_space),
                                   len(sampler.slots), obs_space, act_space)


def check_rewards(kind: str, cfg: Any, sampler: Any = None) -> None:
    """``normalize_rewards`` only where it is implemented (gymnasium envs, one agent, one
    at a time or as a vector env)."""
    vector_ok = kind == "vector" and getattr(sampler, "reward_normalizer", None) is not None
    if kind != "env" and cfg.normalize_rewards is True and not vector_ok:
        raise ValueError("normalize_rewards: only runners of gymnasium envs (one agent, "
                         "not the Atari vector env) normalize rewards; use clip_rewards")


def bind(kind: str, sampler: Any, policies: dict[str, Any], cfg: Any,
         main_script: str | None) -> None:
    """The runner's policies into its sampler (a multi-agent one maps agents to them)."""
    if kind == "multi_agent":
        bind_policies(sampler, policies, cfg, main_script)

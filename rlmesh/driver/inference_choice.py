"""Where a run computes its actions (``inference_mode``): in each runner, or in one central
inference actor. "auto" measures, at build, the runner's own forward pass against an env
step, and takes central inference only where it pays: a conv policy whose forward pass
costs more than a quarter of an env step, and a GPU or a spare core to run it on."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import numpy as np

from rlmesh.env.registry import space_from_data
from rlmesh.rl.spec import image_shape

log = logging.getLogger(__name__)

#: Central inference pays when the runner's forward pass is at least this share of a step.
FORWARD_SHARE = 0.25


def choose_inference(cfg: Any, policy_specs: dict[str, Any]) -> dict[str, Any]:
    """``{"mode": "runner"|"central", "reason": ..., and what was measured}``."""
    asked = cfg.inference_mode
    if asked == "central" and (len(policy_specs) != 1 or cfg.policy_server_address is not None):
        raise ValueError("inference_mode='central' serves one policy to env runners that step "
                         "their own envs; multi-agent runs and policy servers act in their "
                         "runners: set inference_mode 'runner' or 'auto'")
    if asked != "auto":
        return {"mode": asked, "reason": f"inference_mode={asked!r}"}
    if cfg.num_env_runners == 0 or cfg.policy_server_address is not None:
        return {"mode": "runner", "reason": "no env-runner processes to serve"}
    if len(policy_specs) != 1:
        return {"mode": "runner", "reason": "multi-agent: each runner acts per policy"}
    spec = next(iter(policy_specs.values()))
    obs_space = space_from_data(spec["observation_space"])
    if image_shape(obs_space) is None:
        return {"mode": "runner", "reason": "not a conv policy: the runner's pass is cheap"}
    import torch

    gpu = torch.cuda.is_available()
    learner_cores = max(1, cfg.num_learners) * (cfg.num_cpus_per_learner
                                               if isinstance(cfg.num_cpus_per_learner, (int, float))
                                               else 1)
    spare = (os.cpu_count() or 1) - cfg.num_env_runners - learner_cores
    if not gpu and spare < 1:  # nothing to measure for: start-up stays short
        return {"mode": "runner", "reason": "no GPU and no spare core for an inference actor",
                "gpu": gpu, "spare_cores": spare}
    forward_ms = _forward_ms_per_obs(spec, cfg, obs_space, cfg.num_envs_per_env_runner)
    env_ms = _env_ms_per_step(cfg)
    measured = {"forward_ms_per_obs": round(forward_ms, 3), "env_ms_per_step": round(env_ms, 3),
                "gpu": gpu, "spare_cores": spare}
    if forward_ms < FORWARD_SHARE * env_ms:
        return {"mode": "runner", "reason": f"the runner's forward pass is under "
                f"{FORWARD_SHARE:.0%} of an env step", **measured}
    where = "the GPU" if gpu else f"{spare} spare core(s)"
    return {"mode": "central", "reason": f"forward pass {forward_ms / env_ms:.0%} of an env "
            f"step; {where} take it", **measured}


def _forward_ms_per_obs(spec: dict[str, Any], cfg: Any, obs_space: Any, batch: int) -> float:
    """The runner's forward pass on one core, per observation, at its batch size."""
    import torch

    from rlmesh.policy.policy_spec import build_policy_from_data

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as a runner process runs it
    try:
        policy = build_policy_from_data(spec, cfg, runner=True)
        obs = np.zeros((batch, *obs_space.shape), obs_space.dtype)
        policy.compute_actions(obs)
        start, n = time.perf_counter(), 0
        while time.perf_counter() - start < 0.3 or n < 3:
            policy.compute_actions(obs)
            n += 1
        return (time.perf_counter() - start) / n / batch * 1e3
    finally:
        torch.set_num_threads(threads)


def _env_ms_per_step(cfg: Any) -> float:
    """One env's step, from a copy made here and stepped with random actions."""
    from rlmesh.env.registry import make_env

    env = make_env(cfg.env, cfg.env_config, model=cfg.model,
                   preprocessor_pref=cfg.preprocessor_pref)
    try:
        env.reset(seed=0)
        start, n = time.perf_counter(), 0
        while time.perf_counter() - start < 0.3 or n < 10:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                env.reset()
            n += 1
        return (time.perf_counter() - start) / n * 1e3
    finally:
        env.close()

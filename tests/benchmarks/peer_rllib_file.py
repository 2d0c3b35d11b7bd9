"""RLlib's side of bench_conformance: one tuned-example file run by RLlib itself, the way
`rllib train -f FILE` ran it, until the file's stop. Runs in RLlib's venv (.venv-rllib), imports
nothing of rlmesh, and prints one JSON line: {"result": {...}} with timesteps_total,
time_total_s and the file's reward key, or {"error": "..."} when RLlib refuses the file (RLlib
2.60 keeps PPO, APPO, IMPALA, DQN, SAC, BC and MARWIL, on its new API stack only).

``.venv-rllib/bin/python tests/benchmarks/peer_rllib_file.py FILE [--seed S]``
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import psutil

NEW_KEYS = {"episode_reward_mean": "env_runners/episode_return_mean",
            "sampler_results/episode_reward_mean": "env_runners/episode_return_mean",
            "timesteps_total": "num_env_steps_sampled_lifetime"}


def flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flat(v, f"{prefix}{k}/"))
        else:
            out[f"{prefix}{k}"] = v
    return out


def load(path: str) -> dict:
    import yaml

    with open(path) as f:
        data = yaml.safe_load(f)
    return data if "run" in data else next(iter(data.values()))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("file")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    exp = load(args.file)
    out: dict = {}
    try:
        out = train(exp, args.seed)
    except Exception as e:  # RLlib refusing the file is a row, not a crash
        out = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]}
    finally:
        shutdown()
    print(json.dumps(out, default=float), flush=True)


def train(exp: dict, seed: int) -> dict:
    import ray
    from ray.tune.registry import get_trainable_cls

    from peer_rllib_async import logical_cpus

    trainable = get_trainable_cls(exp["run"])  # an algorithm RLlib no longer has: at once
    config = trainable.get_default_config()
    keys = dict(exp.get("config") or {})
    model = keys.pop("model", None) or {}
    config = config.update_from_dict({**keys, "seed": seed})
    config = config.environment(exp["env"])
    ignored = new_stack_model(config, model)
    # one logical CPU per env runner and learner actor: ray waits forever for an actor
    # that does not fit (IMPALA's 2 runners and its learner actor on a 2-core machine)
    ray.init(num_cpus=logical_cpus(config), include_dashboard=False, log_to_driver=False)
    stop = {NEW_KEYS.get(k, k): v for k, v in (exp.get("stop") or {}).items()}
    algo = config.build()
    start = time.perf_counter()
    try:
        while True:
            result = flat(algo.train())
            done = [k for k, v in stop.items() if k in result and result[k] >= v]
            line = {**summary(result, time.perf_counter() - start, done),
                    **({"model_keys_ignored": ignored} if ignored else {})}
            if done:
                return line
            print(json.dumps({**line, "partial": True}, default=float), flush=True)
    finally:
        algo.stop()


def new_stack_model(config, model: dict) -> list[str]:
    """The file's ``model`` keys given to RLlib the way its new API stack reads them:
    ``config.model`` (what ``update_from_dict`` fills) is the old stack's and the new
    stack's RLModules never read it, so a file's ``fcnet_hiddens`` would be dropped in
    silence. On the new stack the keys ``DefaultModelConfig`` has go to
    ``rl_module(model_config=...)`` and the others are returned (reported with the result);
    on the old stack all go to ``config.training(model=...)``."""
    if not model:
        return []
    if not config.enable_rl_module_and_learner:
        config.training(model=model)
        return []
    import dataclasses

    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    known = {f.name for f in dataclasses.fields(DefaultModelConfig)}
    config.rl_module(model_config=DefaultModelConfig(
        **{k: v for k, v in model.items() if k in known}))
    return sorted(k for k in model if k not in known)


def summary(result: dict, seconds: float, done: list) -> dict:
    """The figures bench_conformance reads, under both stacks' reward keys."""
    reward = result.get("env_runners/episode_return_mean")
    return {"result": {"timesteps_total": result.get("num_env_steps_sampled_lifetime"),
                       "time_total_s": seconds,
                       **{k: reward for k in ("episode_reward_mean",
                                              "sampler_results/episode_reward_mean",
                                              "env_runners/episode_return_mean")}},
            "stopped_by": done}


def shutdown() -> None:
    try:
        import ray

        ray.shutdown()
    finally:
        for child in psutil.Process().children(recursive=True):
            child.kill()


if __name__ == "__main__":
    sys.exit(main())

"""The conformance files (files/*.yaml): for each algorithm, the keys and values of RLlib's
tuned examples for it, in RLlib's file shape, run with `rlmesh train -f` unchanged. Shared by
the CI test (each loads and trains one shrunken iteration) and the benchmark
(tests/benchmarks/bench_conformance.py: each CartPole/Pendulum file to its own stop)."""

from __future__ import annotations

import argparse
from pathlib import Path

FILES = Path(__file__).with_name("files")


def all_files() -> list[Path]:
    return sorted(FILES.glob("*.yaml"))


def args_for(path: Path, **flags) -> argparse.Namespace:
    """The parsed `rlmesh train -f PATH [flags]` command line."""
    from rlmesh.cli.train import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    argv = ["-f", str(path)]
    for flag, value in flags.items():
        argv += [f"--{flag.replace('_', '-')}", str(value)]
    return parser.parse_args(argv)


def specs_of(path: Path, **flags):
    """[(TrainSpec, experiment dict)] of the file, as `rlmesh train -f` reads it."""
    from rlmesh.cli.train import resolve_specs

    return resolve_specs(args_for(path, **flags))


def variants(config: dict) -> list[dict]:
    """The trial configs of a sweep (one: the config itself)."""
    from rlmesh.tune.spaces import grid_variants, has_domains

    return [v for v, _ in grid_variants(config)] if has_domains(config) else [config]


# Keys made smaller so that one iteration of any file takes seconds (CI): the file's other
# keys (its model, losses, exploration, replay type, ...) are what the test exercises.
def shrunk(config: dict, run: str = "") -> dict:
    small = dict(config)
    small["num_env_runners"] = min(int(small.get("num_env_runners", 0) or 0), 1)
    small["evaluation_interval"] = None
    for key, cap in (("train_batch_size", 256), ("min_sample_timesteps_per_iteration", 64),
                     ("num_steps_sampled_before_learning_starts", 32),
                     ("min_time_s_per_iteration", 0.5), ("episodes_per_batch", 2),
                     ("num_rollouts", 2), ("rollouts_used", 2), ("num_epochs", 2)):
        if isinstance(small.get(key), (int, float)):
            small[key] = min(small[key], cap)
    if isinstance(small.get("minibatch_size"), int):
        small["minibatch_size"] = min(small["minibatch_size"], small.get("train_batch_size", 64))
    if isinstance(small.get("rollout_fragment_length"), int):
        small["rollout_fragment_length"] = min(small["rollout_fragment_length"], 64)
    small.pop("train_batch_size_per_learner", None)
    if str(run).upper().startswith("APEX"):  # a runner feeds each replay shard
        small["num_env_runners"] = 1
        small.pop("optimizer", None)
        small["num_replay_buffer_shards"] = 1
    if small.get("num_gpus_per_learner") or small.get("num_gpus"):  # asked for by the file; run on the CPU here
        small["_fake_gpus"] = True
    if isinstance(small.get("noise_size"), int):  # ES/ARS's shared noise table
        small["noise_size"] = min(small["noise_size"], 1_000_000)
    if isinstance(small.get("replay_buffer_config"), dict):
        small["replay_buffer_config"] = {**small["replay_buffer_config"], "capacity": 5000}
    return small

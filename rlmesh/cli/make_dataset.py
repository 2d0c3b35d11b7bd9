"""Datasets made here for the offline algorithms (CQL, IQL, BC, MARWIL), in two ways:

- the run's replay (the default): a training run (SAC's tuned example by default) writes
  every step it samples (``output``) until its return reaches a target; D4RL calls such
  data "medium-replay" (or "expert-replay" at a high target);
- ``--policy-rollout N``: D4RL's "medium" recipe. The run trains without writing until its
  greedy evaluation return (``--eval-episodes`` episodes every ``--eval-every`` env steps)
  reaches the target, keeps that policy (a checkpoint in ``DIR/policy``), then plays it,
  sampling its actions (explore on, as D4RL's medium data), for N env steps (whole
  episodes: the last one is played to its end), written as the offline format.

The dataset's own average episode return is then measured on what was written and recorded
beside it (``dataset_info.yaml``), the figure an offline algorithm must beat.

    python -m rlmesh.cli.make_dataset ~/rlmesh_data/pendulum-medium-replay --target -700
    python -m rlmesh.cli.make_dataset ~/rlmesh_data/hopper-medium-replay \\
        -f hopper-sac.yaml --target 1500 --max-steps 300000 --format parquet
    python -m rlmesh.cli.make_dataset ~/rlmesh_data/halfcheetah-medium -f halfcheetah-sac.yaml \\
        --target 4000 --max-steps 300000 --policy-rollout 200000 --format parquet

A script on top of the library (it builds an algorithm by name, as ``rlmesh train`` does);
nothing in rlmesh imports it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

from rlmesh.offline.reader import OfflineDataset
from rlmesh.rl.columns import Columns

INFO_FILE = "dataset_info.yaml"  # not a data file: readers take .json, .jsonl, .parquet


def episode_returns(directory: str | Path) -> dict[str, Any]:
    """The average (min, max) undiscounted return of the dataset's whole episodes (ended by
    termination or truncation; one the run stopped in is left out) and its counts."""
    dataset = OfflineDataset(str(directory), shuffle=False)
    ended = [e for e in dataset.episodes
             if e[Columns.TERMINATEDS][-1] or e[Columns.TRUNCATEDS][-1]]
    returns = np.array([float(np.sum(e[Columns.REWARDS])) for e in ended])
    mean = float(returns.mean()) if len(returns) else math.nan
    return {"mean_return": mean, "min_return": float(returns.min(initial=math.inf)),
            "max_return": float(returns.max(initial=-math.inf)),
            "num_episodes": len(ended), "num_steps": dataset.num_steps,
            "num_records_skipped": dataset.num_skipped}


def make_dataset(out_dir: str | Path, target_return: float, max_env_steps: int,
                 experiment: str = "pendulum-sac.yaml", config: dict | None = None,
                 fmt: str = "json", seed: int | None = 0,
                 log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train ``experiment``'s algorithm with ``output`` to ``out_dir`` until its
    ``episode_reward_mean`` reaches ``target_return`` or ``max_env_steps`` are sampled; the
    dataset's statistics (``episode_returns``) with the run's, also written to
    ``out_dir/dataset_info.yaml``. ``config`` updates the experiment's config."""
    from rlmesh import tuned_examples
    from rlmesh.driver.algorithm_registry import get_config_class

    _, exp, _ = tuned_examples.load_experiment(experiment)
    out = Path(out_dir).expanduser()
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty: a dataset is made into a new folder")
    settings = {**exp.get("config", {}), "env": exp["env"], **(config or {}),
                "output": str(out), "output_format": fmt, "seed": seed}
    algo = get_config_class(exp["run"]).from_dict(settings).build()
    try:
        while True:
            result = algo.train()
            reward, steps = result.get("episode_reward_mean"), result["timesteps_total"]
            log(f"iteration {result['training_iteration']}: {steps} env steps, "
                f"episode_reward_mean {reward}")
            if (reward is not None and reward >= target_return) or steps >= max_env_steps:
                break
    finally:
        algo.stop()  # closes the writers: a Parquet file is readable once closed
    info = {**episode_returns(out), "experiment": experiment, "run": exp["run"],
            "env": exp["env"], "target_return": target_return,
            "reached_return": reward, "env_steps_sampled": steps, "seed": seed,
            "format": fmt}
    _write_info(out / INFO_FILE, info)
    return info


POLICY_DIR = "policy"  # the kept policy's checkpoint, beside the data (readers skip folders)


def make_policy_dataset(out_dir: str | Path, target_return: float, max_env_steps: int,
                        rollout_steps: int, experiment: str = "pendulum-sac.yaml",
                        config: dict | None = None, fmt: str = "json", seed: int | None = 0,
                        eval_every: int = 10_000, eval_episodes: int = 5,
                        log: Callable[[str], None] = print) -> dict[str, Any]:
    """D4RL's "medium" recipe: train ``experiment``'s algorithm (writing nothing) until its
    greedy evaluation return (``eval_episodes`` episodes, every ``eval_every`` env steps)
    reaches ``target_return`` or ``max_env_steps`` are sampled; keep that policy (a
    checkpoint in ``out_dir/policy``); play it with its actions sampled (explore on) for
    ``rollout_steps`` env steps and then to the end of the episode under way, written to
    ``out_dir`` in ``fmt``. The dataset's statistics (``episode_returns``) with the run's,
    also written to ``out_dir/dataset_info.yaml``."""
    from rlmesh import tuned_examples
    from rlmesh.cli.rollout import make_env
    from rlmesh.driver.algorithm_registry import get_config_class
    from rlmesh.driver.inference import InferencePolicy
    from rlmesh.offline.writer import EpisodeWriter
    from rlmesh.preprocessing import wrap_for_model

    for name, value in (("rollout_steps", rollout_steps), ("eval_every", eval_every),
                        ("eval_episodes", eval_episodes)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    _, exp, _ = tuned_examples.load_experiment(experiment)
    out = Path(out_dir).expanduser()
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty: a dataset is made into a new folder")
    settings = {**exp.get("config", {}), "env": exp["env"], **(config or {}), "seed": seed,
                "evaluation_duration": eval_episodes, "evaluation_duration_unit": "episodes"}
    algo = get_config_class(exp["run"]).from_dict(settings).build()
    evaluations: list[list[float]] = []
    greedy, next_eval = None, eval_every
    try:
        while True:
            result = algo.train()
            steps = result["timesteps_total"]
            line = (f"iteration {result['training_iteration']}: {steps} env steps, "
                    f"episode_reward_mean {result.get('episode_reward_mean')}")
            if steps >= next_eval or steps >= max_env_steps:
                next_eval = steps + eval_every
                greedy = algo.evaluate()["evaluation"]["episode_reward_mean"]
                evaluations.append([steps, greedy])
                line += f", greedy evaluation {greedy}"
            log(line)
            if (greedy is not None and greedy >= target_return) or steps >= max_env_steps:
                break
        checkpoint = algo.save(out / POLICY_DIR)
    finally:
        algo.stop()
    policy = InferencePolicy.from_checkpoint(checkpoint)
    policy.get_policy().seed(seed)
    model = dict(policy.config.model or {})
    env = wrap_for_model(make_env(exp["env"], dict(policy.config.env_config or {}), model=model,
                                  preprocessor_pref=policy.config.preprocessor_pref), model)
    writer = EpisodeWriter(out / f"rollout.{'parquet' if fmt == 'parquet' else 'json'}")
    try:
        played = _play(policy, env, rollout_steps, seed, writer)
    finally:
        writer.close()
        env.close()
    log(f"rollout: {played} env steps, {writer.num_episodes} episodes")
    info = {**episode_returns(out), "experiment": experiment, "run": exp["run"],
            "env": exp["env"], "recipe": "policy rollout (D4RL's medium)",
            "target_return": target_return, "policy_greedy_return": greedy,
            "policy_env_steps_trained": steps, "policy_checkpoint": POLICY_DIR,
            "rollout_explore": True, "evaluations": evaluations, "seed": seed, "format": fmt}
    _write_info(out / INFO_FILE, info)
    return info


def _play(policy: Any, env: Any, steps: int, seed: int | None, writer: Any) -> int:
    """Step ``env`` with ``policy``'s sampled actions into ``writer`` until ``steps`` are
    taken and the episode under way has ended; the steps taken."""
    obs, _ = env.reset(seed=seed)
    taken = 0
    while True:
        obs_column, action_column, action, _, extra = policy.compute_step(obs, None, True)
        obs, reward, terminated, truncated, _ = env.step(action)
        writer.add_step(obs_column, action_column, float(reward), terminated, truncated,
                        policy.obs_column(obs), extra)
        taken += 1
        if terminated or truncated:
            if taken >= steps:
                return taken
            obs, _ = env.reset()


def _write_info(path: Path, info: dict[str, Any]) -> None:
    import yaml

    with open(path, "x", encoding="utf-8") as f:
        yaml.safe_dump(info, f, sort_keys=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rlmesh.cli.make_dataset", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out_dir", help="a new (or empty) folder for the data files")
    p.add_argument("--target", type=float, required=True,
                   help="stop once the run's episode_reward_mean (with --policy-rollout: its "
                        "greedy evaluation return) reaches this return")
    p.add_argument("--max-steps", type=int, default=100_000,
                   help="stop after this many env steps at most (default 100000)")
    p.add_argument("-f", "--file", default="pendulum-sac.yaml",
                   help="the experiment that makes the data (default pendulum-sac.yaml)")
    p.add_argument("--config", default="{}", help="JSON dict over the experiment's config")
    p.add_argument("--format", choices=["json", "parquet"], default="json")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--policy-rollout", type=int, metavar="N",
                   help="D4RL's medium recipe: write N env steps (whole episodes) of the "
                        "policy that reached --target, its actions sampled, instead of the "
                        "run's replay")
    p.add_argument("--eval-every", type=int, default=10_000,
                   help="with --policy-rollout: env steps between greedy evaluations "
                        "(default 10000)")
    p.add_argument("--eval-episodes", type=int, default=5,
                   help="with --policy-rollout: episodes per greedy evaluation (default 5)")
    args = p.parse_args(argv)
    try:
        if args.policy_rollout is None:
            info = make_dataset(args.out_dir, args.target, args.max_steps, args.file,
                                json.loads(args.config), args.format, args.seed)
        else:
            info = make_policy_dataset(args.out_dir, args.target, args.max_steps,
                                       args.policy_rollout, args.file, json.loads(args.config),
                                       args.format, args.seed, args.eval_every,
                                       args.eval_episodes)
    except (FileExistsError, ValueError) as e:  # ConfigError, a bad file or --config
        print(f"make_dataset: error: {e}", file=sys.stderr)
        return 2
    print(f"{info['num_steps']} steps, {info['num_episodes']} whole episodes, average return "
          f"{info['mean_return']:.1f} (min {info['min_return']:.1f}, max "
          f"{info['max_return']:.1f}) -> {args.out_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

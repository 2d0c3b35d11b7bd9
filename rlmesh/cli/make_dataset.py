"""Datasets made here for the offline algorithms (CQL, IQL, BC, MARWIL): a training run (SAC's
tuned example by default) writes every step it samples (``output``) until its return reaches
a target, so the data is that run's replay up to a "medium" or an "expert" level; the
dataset's own average episode return is then measured on what was written and recorded
beside it (``dataset_info.yaml``), the figure an offline algorithm must beat.

    python -m rlmesh.cli.make_dataset ~/rlmesh_data/pendulum-medium --target -700
    python -m rlmesh.cli.make_dataset ~/rlmesh_data/hopper-medium \\
        -f hopper-sac.yaml --target 1500 --max-steps 300000 --format parquet

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


def _write_info(path: Path, info: dict[str, Any]) -> None:
    import yaml

    with open(path, "x", encoding="utf-8") as f:
        yaml.safe_dump(info, f, sort_keys=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rlmesh.cli.make_dataset", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out_dir", help="a new (or empty) folder for the data files")
    p.add_argument("--target", type=float, required=True,
                   help="stop once the run's episode_reward_mean reaches this return")
    p.add_argument("--max-steps", type=int, default=100_000,
                   help="stop after this many env steps at most (default 100000)")
    p.add_argument("-f", "--file", default="pendulum-sac.yaml",
                   help="the experiment that makes the data (default pendulum-sac.yaml)")
    p.add_argument("--config", default="{}", help="JSON dict over the experiment's config")
    p.add_argument("--format", choices=["json", "parquet"], default="json")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    try:
        info = make_dataset(args.out_dir, args.target, args.max_steps, args.file,
                            json.loads(args.config), args.format, args.seed)
    except (FileExistsError, ValueError) as e:  # ConfigError, a bad file or --config
        print(f"make_dataset: error: {e}", file=sys.stderr)
        return 2
    print(f"{info['num_steps']} steps, {info['num_episodes']} whole episodes, average return "
          f"{info['mean_return']:.1f} (min {info['min_return']:.1f}, max "
          f"{info['max_return']:.1f}) -> {args.out_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

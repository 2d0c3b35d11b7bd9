"""Datasets made by other tools, converted to rlmesh's offline format (docs/offline.md):
a Minari dataset, or a plain numpy ``.npz`` of (obs, action, reward, done) arrays.

    python -m rlmesh.offline.convert minari D4RL/door/human-v2 ~/data/door
    python -m rlmesh.offline.convert npz expert.npz ~/data/expert [--format parquet]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from rlmesh.extras import require
from rlmesh.offline.records import episode_record
from rlmesh.offline.writer import OutputWriter
from rlmesh.rl.columns import Columns

# Accepted names of each array in an .npz file (the first found is used).
NPZ_NAMES = {
    Columns.OBS: ("obs", "observations", "states"),
    Columns.ACTIONS: ("action", "actions"),
    Columns.REWARDS: ("reward", "rewards"),
    "done": ("done", "dones", "terminal", "terminals", "terminated", "terminateds"),
}


def write(records: Iterable[dict[str, np.ndarray]], out_dir: str | Path, fmt: str = "json",
          max_file_size: int = 64 * 1024 * 1024) -> int:
    """Write records to ``out_dir``; the number of steps written."""
    writer = OutputWriter(out_dir, 0, fmt, max_file_size)
    try:
        for rec in records:
            writer.write_records([rec])
    finally:
        writer.close()
    return writer.steps_written


def minari_records(dataset: Any) -> Iterable[dict[str, np.ndarray]]:
    """The episodes of a Minari dataset (its id, or a loaded MinariDataset). Minari keeps
    n + 1 observations per episode of n steps: the last is the final one (new_obs)."""
    if isinstance(dataset, str):
        dataset = require("minari", "data", "Minari conversion").load_dataset(dataset)
    for ep in dataset.iterate_episodes():
        obs = np.asarray(ep.observations)
        if isinstance(ep.observations, dict):
            raise ValueError("Minari dataset with dict observations: convert it yourself "
                             "(rlmesh.offline.convert.episode_record per episode)")
        yield episode_record(obs[:-1], ep.actions, ep.rewards, ep.terminations,
                             ep.truncations, obs[1:])


def npz_records(path: str | Path) -> Iterable[dict[str, np.ndarray]]:
    """The episodes of an ``.npz`` with flat step arrays: obs [N, ...], action [N, ...],
    reward [N], done [N] (True on each episode's last step, counted as terminated;
    an optional ``truncated`` [N] marks time-limit ends, an optional ``next_obs`` [N, ...]
    gives each step's next observation). Steps after the last done form
    an episode the data cuts short (trained on as truncated)."""
    data = np.load(path, allow_pickle=False)
    arrays = {}
    for key, names in NPZ_NAMES.items():
        found = next((n for n in names if n in data.files), None)
        if found is None:
            raise ValueError(f"{path}: no {key} array (one of {', '.join(names)}); it has "
                             f"{', '.join(data.files)}")
        arrays[key] = data[found]
    n = len(arrays[Columns.REWARDS])
    if any(len(a) != n for a in arrays.values()):
        raise ValueError(f"{path}: arrays of different lengths "
                         f"{ {k: len(a) for k, a in arrays.items()} }")
    truncated = data["truncated"].astype(bool) if "truncated" in data.files else np.zeros(n, bool)
    done = arrays["done"].astype(bool) | truncated
    ends = [*np.flatnonzero(done) + 1]
    if not ends or ends[-1] != n:
        ends.append(n)
    obs = arrays[Columns.OBS]
    nexts = next((data[k] for k in ("next_obs", "next_observations") if k in data.files), None)
    for lo, hi in zip([0, *ends[:-1]], ends):
        # Without next_obs an episode's final observation is unknown: its last obs stands in
        # (read only if the episode was truncated, to bootstrap from).
        new_obs = (nexts[lo:hi] if nexts is not None
                   else np.concatenate([obs[lo + 1:hi], obs[hi - 1:hi]]))
        yield episode_record(obs[lo:hi], arrays[Columns.ACTIONS][lo:hi],
                             arrays[Columns.REWARDS][lo:hi], done[lo:hi] & ~truncated[lo:hi],
                             truncated[lo:hi], new_obs)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rlmesh.offline.convert", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=["minari", "npz"])
    p.add_argument("source", help="a Minari dataset id, or an .npz file")
    p.add_argument("out_dir")
    p.add_argument("--format", choices=["json", "parquet"], default="json")
    args = p.parse_args(argv)
    records = minari_records(args.source) if args.kind == "minari" else npz_records(args.source)
    steps = write(records, args.out_dir, args.format)
    print(f"wrote {steps} steps to {args.out_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

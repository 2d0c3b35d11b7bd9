"""Learning curves of ``rlmesh train`` runs on one plot: the mean return of the last 100
episodes against env steps, read from each run's result.json (docs/img/recurrent_curves.png
in docs/observations_and_memory.md is made with it). Needs matplotlib.

``python -m tests.benchmarks.recurrent_curves OUT.png "LABEL=RESULTS_DIR" ...``: each
RESULTS_DIR is a ``--local-dir`` (or a trial folder) with one result.json below it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def curve(results_dir: Path) -> tuple[list[int], list[float]]:
    path = next(iter(sorted(results_dir.rglob("result.json"))))
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r["timesteps_total"] for r in rows], [r["episode_reward_mean"] for r in rows]


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not all("=" in a for a in argv[1:]):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for spec in argv[1:]:
        label, _, folder = spec.partition("=")
        steps, means = curve(Path(folder))
        ax.plot(steps, means, label=label)
        print(f"{label}: {len(steps)} iterations, last {steps[-1]:,} steps, mean {means[-1]:.1f}, "
              f"best {max(means):.1f}")
    ax.set_xlabel("env steps")
    ax.set_ylabel("mean return, last 100 episodes")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(argv[0], dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

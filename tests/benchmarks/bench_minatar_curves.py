"""Learning curves of PPO on MinAtar Breakout and SpaceInvaders: rlmesh with the tuned examples
(rlmesh/tuned_examples/minatar-*-ppo.yaml) beside the CleanRL-style single-process PPO of
bench_minatar.py given the same settings (net, batch, minibatches, epochs, lr, losses), seeds
0-2, one run at a time, the two sides taking turns. Not in CI; needs minatar and matplotlib.

``python -m tests.benchmarks.bench_minatar_curves [--steps N] [--games ...] [--seeds ...]``
writes docs/benchmarks/minatar_curves.csv (one row per iteration: env steps, seconds since
the run started, mean return of the last 100 episodes), docs/img/minatar_curves.png (return
against env steps and against seconds, mean over seeds with a min-max band) and prints a
table. ``--plot-only`` redraws the figure and the table from the CSV. The default 300k steps
is the examples' budget (their lr falls to 0 there): the 12 runs took 21.5 min on 2 cores.
"""

from __future__ import annotations

import argparse
import csv
import functools
import math
import statistics
import time
import warnings
from pathlib import Path

import numpy as np

from tests.benchmarks.bench_minatar import SingleProcessPPO, make_minatar

ROOT = Path(__file__).resolve().parents[2]
CSV_PATH = ROOT / "docs" / "benchmarks" / "minatar_curves.csv"
PNG_PATH = ROOT / "docs" / "img" / "minatar_curves.png"
TUNED = {"breakout": "minatar-breakout-ppo.yaml",  # rlmesh/tuned_examples
         "space_invaders": "minatar-space-invaders-ppo.yaml"}
SIDES = ("rlmesh", "cleanrl")
LABELS = {"rlmesh": "rlmesh (2 runner processes + learner)",
          "cleanrl": "CleanRL-style, 1 process"}
COLUMNS = ("game", "side", "seed", "iteration", "env_steps", "wall_s", "return_mean_100")
WINDOW = 100  # episodes in each point's mean: rlmesh's metrics_num_episodes_for_smoothing


def tuned(game: str) -> tuple[str, dict]:
    """(gymnasium id, PPO config dict) of the game's tuned example."""
    from rlmesh.tuned_examples import load_experiment

    _, exp, _ = load_experiment(TUNED[game])
    assert exp["run"] == "PPO", exp["run"]
    return exp["env"], exp["config"]


def rlmesh_curve(game: str, seed: int, steps: int) -> list[tuple[int, float, float]]:
    """[(env steps, seconds since build started, mean return)] per train() until ``steps``."""
    from rlmesh.algorithms import PPOConfig

    env_id, config = tuned(game)
    t0 = time.perf_counter()  # the processes' start counts: the user waits for it too
    # The creator registers minatar's ids in each runner (a fresh interpreter) first.
    ppo = PPOConfig.from_dict({**config, "env": "tests.benchmarks.bench_minatar:make_minatar",
                               "env_config": {"id": env_id}, "seed": seed,
                               "metrics_num_episodes_for_smoothing": WINDOW})
    points = []
    with ppo.build() as algo:
        while not points or points[-1][0] < steps:
            result = algo.train()
            points.append((int(result["timesteps_total"]), time.perf_counter() - t0,
                           float(result["episode_reward_mean"])))
    return points


def cleanrl_curve(game: str, seed: int, steps: int) -> list[tuple[int, float, float]]:
    """The same points from SingleProcessPPO with the tuned example's settings."""
    env_id, config = tuned(game)
    t0 = time.perf_counter()
    ppo = SingleProcessPPO(functools.partial(make_minatar, {"id": env_id}), config, seed)
    points = []
    try:
        while ppo.env_steps < steps:
            ppo.update(ppo.rollout(True))
            mean = float(np.mean(ppo.returns[-WINDOW:])) if ppo.returns else math.nan
            points.append((ppo.env_steps, time.perf_counter() - t0, mean))
    finally:
        ppo.close()
    return points


def read_rows(path: Path = CSV_PATH) -> list[dict]:
    with path.open() as f:
        return [{**r, "seed": int(r["seed"]), "iteration": int(r["iteration"]),
                 "env_steps": int(r["env_steps"]), "wall_s": float(r["wall_s"]),
                 "return_mean_100": float(r["return_mean_100"])} for r in csv.DictReader(f)]


def runs_of(rows: list[dict]) -> dict[tuple[str, str], list[np.ndarray]]:
    """{(game, side): [array of (env_steps, wall_s, return) per seed]}."""
    runs: dict[tuple[str, str], dict[int, list]] = {}
    for r in rows:
        runs.setdefault((r["game"], r["side"]), {}).setdefault(r["seed"], []).append(
            (r["env_steps"], r["wall_s"], r["return_mean_100"]))
    return {k: [np.array(v[s]) for s in sorted(v)] for k, v in runs.items()}


def summary(rows: list[dict]) -> str:
    """Markdown table: final return mean +- sd over seeds, seconds per run, env steps/s."""
    lines = ["| game | side | seeds | env steps | final return (mean ± sd) | per seed "
             "| wall per run, s | env steps/s |",
             "| --- | --- | ---: | ---: | ---: | --- | ---: | ---: |"]
    for (game, side), runs in sorted(runs_of(rows).items()):
        final = [run[-1, 2] for run in runs]
        wall = [run[-1, 1] for run in runs]
        rate = [run[-1, 0] / run[-1, 1] for run in runs]
        sd = statistics.stdev(final) if len(final) > 1 else 0.0
        lines.append(f"| {game} | {side} | {len(runs)} | {int(runs[0][-1, 0]):,} | "
                     f"{statistics.mean(final):.2f} ± {sd:.2f} | "
                     f"{', '.join(f'{x:.2f}' for x in final)} | "
                     f"{statistics.mean(wall):.0f} ({min(wall):.0f}-{max(wall):.0f}) | "
                     f"{statistics.mean(rate):,.0f} |")
    return "\n".join(lines)


def _band(ax, x: np.ndarray, ys: np.ndarray, colour: str, label: str) -> None:
    with warnings.catch_warnings():  # NaN before the first episode ends: left blank
        warnings.simplefilter("ignore", RuntimeWarning)
        ax.plot(x, np.nanmean(ys, axis=0), color=colour, label=label)
        ax.fill_between(x, np.nanmin(ys, axis=0), np.nanmax(ys, axis=0), color=colour,
                        alpha=0.2)


def plot(rows: list[dict], path: Path = PNG_PATH) -> None:
    """Games as rows; return against env steps (left) and against seconds (right). On the
    seconds axis each seed is interpolated onto one grid ending where its side's shortest
    run ends, so every point is a mean over all seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = runs_of(rows)
    games = [g for g in TUNED if any(k[0] == g for k in runs)]
    fig, axes = plt.subplots(len(games), 2, figsize=(11, 3.6 * len(games)), squeeze=False)
    for row, game in zip(axes, games):
        for side, colour in zip(SIDES, ("tab:blue", "tab:orange")):
            seeds = runs.get((game, side))
            if not seeds:
                continue
            n = min(len(r) for r in seeds)
            _band(row[0], seeds[0][:n, 0], np.stack([r[:n, 2] for r in seeds]), colour,
                  f"{LABELS[side]}, {len(seeds)} seeds")
            grid = np.linspace(max(r[0, 1] for r in seeds), min(r[-1, 1] for r in seeds), 200)
            ys = np.stack([np.interp(grid, r[:, 1], r[:, 2]) for r in seeds])
            _band(row[1], grid, ys, colour, LABELS[side])
        title = f"MinAtar {game.replace('_', ' ').title().replace(' ', '')}, PPO"
        for ax, xlabel in zip(row, ("env steps", "seconds (2 cores)")):
            ax.set(title=title, xlabel=xlabel, ylabel=f"mean return, last {WINDOW} episodes")
            ax.grid(alpha=0.3)
        row[1].set_xlim(left=0)  # the gap before a side's first point is its start-up
        row[0].legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300_000, help="env steps per run")
    parser.add_argument("--games", nargs="+", default=list(TUNED), choices=list(TUNED))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--csv", type=Path, default=CSV_PATH)
    parser.add_argument("--png", type=Path, default=PNG_PATH)
    parser.add_argument("--plot-only", action="store_true", help="redraw from the CSV")
    args = parser.parse_args()
    if not args.plot_only:
        import rlmesh.algorithms  # noqa: F401  (imported before the clocks start: both sides
        import torch  # noqa: F401              count their own start-up, not this process's)

        args.csv.parent.mkdir(parents=True, exist_ok=True)
        with args.csv.open("w", newline="") as f:
            out = csv.writer(f)
            out.writerow(COLUMNS)
            for game in args.games:
                for seed in args.seeds:
                    for side, curve in (("cleanrl", cleanrl_curve), ("rlmesh", rlmesh_curve)):
                        points = curve(game, seed, args.steps)
                        for i, (steps, wall, ret) in enumerate(points, 1):
                            out.writerow((game, side, seed, i, steps, f"{wall:.2f}", f"{ret:.3f}"))
                        f.flush()  # a run cut short keeps the runs before it
                        print(f"{game} {side} seed {seed}: return {points[-1][2]:.2f} after "
                              f"{points[-1][0]:,} steps in {points[-1][1]:.0f} s", flush=True)
    rows = read_rows(args.csv)
    plot(rows, args.png)
    print(f"MinAtar PPO curves: {args.csv}, {args.png}")
    print(summary(rows))


if __name__ == "__main__":
    main()

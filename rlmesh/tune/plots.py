"""PNG learning curves of a sweep's trials (matplotlib, the ``tune`` extra): one file per
trial, and one with every trial's curve, the metric against training iterations."""

from __future__ import annotations

from pathlib import Path

from rlmesh.extras import require
from rlmesh.results import as_number, flatten
from rlmesh.tune.trial import read_results


def _curve(trial, metric: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for i, result in enumerate(read_results(trial.dir), 1):
        flat = flatten({k: v for k, v in result.items() if k != "config"})
        y = as_number(flat.get(metric))
        if y is not None:
            xs.append(as_number(flat.get("training_iteration")) or i)
            ys.append(y)
    return xs, ys


def plot_trials(analysis, out_dir: Path) -> list[Path]:
    """Write ``<out_dir>/<trial>.png`` for each trial and ``all_trials.png``; their paths."""
    matplotlib = require("matplotlib", "tune", "rlmesh analyze's plots")
    matplotlib.use("Agg")  # files only: no display needed
    plt = require("matplotlib.pyplot", "tune", "rlmesh analyze's plots")
    out_dir.mkdir(parents=True, exist_ok=True)
    metric, paths = analysis.metric, []
    fig_all, ax_all = plt.subplots(figsize=(8, 5))
    for trial in analysis.sorted_trials():
        xs, ys = _curve(trial, metric)
        params = ", ".join(f"{k.rsplit('/', 1)[-1]}={v:.3g}" if isinstance(v, float)
                           else f"{k.rsplit('/', 1)[-1]}={v}" for k, v in trial.params.items())
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot(xs, ys, marker="." if len(xs) < 50 else None)
        ax.set(xlabel="training iteration", ylabel=metric,
               title=f"{trial.trial_id} ({trial.status})\n{params}"[:120])
        ax.grid(alpha=0.3)
        fig.tight_layout()
        path = out_dir / f"{trial.trial_id}.png"
        fig.savefig(path, dpi=80)
        plt.close(fig)
        paths.append(path)
        ax_all.plot(xs, ys, label=trial.trial_id)
    ax_all.set(xlabel="training iteration", ylabel=metric, title=str(analysis.experiment_dir))
    if len(analysis.trials) <= 12:
        ax_all.legend(fontsize="small")
    fig_all.tight_layout()
    fig_all.savefig(out_dir / "all_trials.png", dpi=80)
    plt.close(fig_all)
    return [*paths, out_dir / "all_trials.png"]

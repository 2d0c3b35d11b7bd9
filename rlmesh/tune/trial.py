"""A trial's record (config, status, last result, checkpoints) and the experiment's state
file, ``experiment_state.json``, that ``--resume`` reads back."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlmesh.results import as_number, flatten, lookup, to_jsonable

STATE_FILE = "experiment_state.json"
STATE_VERSION = 1
PENDING, RUNNING, TERMINATED, PRUNED, ERROR = "PENDING", "RUNNING", "TERMINATED", "PRUNED", "ERROR"
DONE = (TERMINATED, PRUNED, ERROR)


@dataclass
class Trial:
    """One configuration trained in its own directory."""

    trial_id: str
    experiment: str  # the -f file's experiment it belongs to
    run: str  # algorithm name, or "pkg.module:function" for a function trainable
    config: dict
    stop: dict
    dir: str
    params: dict = field(default_factory=dict)  # the searched values, by path name
    status: str = PENDING
    iteration: int = 0
    last_result: dict = field(default_factory=dict)  # flat, numbers only
    checkpoints: list = field(default_factory=list)  # [iteration, path], oldest first
    restore_from: str | None = None  # a checkpoint to start from (resume, PBT's exploit)
    error: str = ""
    node: str = ""
    started: float = 0.0
    elapsed: float = 0.0
    optuna_number: int | None = None

    @property
    def last_checkpoint(self) -> str | None:
        return self.checkpoints[-1][1] if self.checkpoints else None

    def metric(self, key: str) -> float | None:
        return as_number(lookup(self.last_result, key))  # either RLlib stack's name

    def record(self, result: dict) -> None:
        """Keep the numbers of ``result`` (flat keys, "a/b/c") as the trial's last result."""
        flat = flatten({k: v for k, v in result.items() if k != "config"})
        self.last_result = {k: v for k, v in to_jsonable(flat).items()
                            if isinstance(v, (int, float)) and not isinstance(v, bool)}
        self.iteration = int(self.last_result.get("training_iteration", self.iteration + 1))

    def to_data(self) -> dict:
        # not dataclasses.asdict: its deep copy of every config was most of a state write
        return to_jsonable(dict(self.__dict__))


def write_state(experiment_dir: Path, trials: list[Trial], meta: dict) -> None:
    """The state file, written atomically (a crash leaves the previous one)."""
    data = {"version": STATE_VERSION, **meta, "trials": [t.to_data() for t in trials]}
    tmp = experiment_dir / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(data, allow_nan=False))
    os.replace(tmp, experiment_dir / STATE_FILE)


def read_state(experiment_dir: Path) -> tuple[list[Trial], dict]:
    """The trials and the rest of the state file of ``experiment_dir``."""
    path = Path(experiment_dir) / STATE_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} does not exist: not a sweep's experiment folder "
                                "(or the sweep never started)") from None
    if data.get("version") != STATE_VERSION:
        raise ValueError(f"{path}: state version {data.get('version')!r}, this rlmesh reads "
                         f"{STATE_VERSION}")
    trials = [Trial(**t) for t in data.pop("trials")]
    return trials, data


def read_results(trial_dir: str | Path) -> list[dict]:
    """Every result a trial logged (its result.json), oldest first."""
    path = Path(trial_dir) / "result.json"
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                try:
                    out.append(json.loads(line))
                except ValueError:  # a line cut short by a kill
                    continue
    return out


def param_tag(params: dict[str, Any], width: int = 60) -> str:
    """``lr=0.001,num_epochs=4`` for a trial folder's name (short names, short numbers)."""
    from rlmesh.results import safe_name

    parts = []
    for key, value in params.items():
        short = key.rsplit("/", 1)[-1]
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        parts.append(f"{short}={shown}")
    return safe_name(",".join(parts))[:width]

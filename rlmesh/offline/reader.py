"""``input``: offline datasets read into whole episodes. Files are found from a directory, a
glob or a list, split between readers (``shard_files``), read record by record (a line or
file that cannot be read is skipped, named and counted), joined by eps_id, checked against
the run's spaces, and served as time-major batches of whole episodes."""

from __future__ import annotations

import glob
import itertools
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from rlmesh.config.settings import ConfigError
from rlmesh.offline.json_io import BadRecord, read_json
from rlmesh.offline.records import NEW_OBS, POLICY_ID, batch_from_episodes, join_episodes
from rlmesh.rl.columns import Columns, space_layout

if TYPE_CHECKING:
    from rlmesh.config.base import AlgorithmConfig

log = logging.getLogger(__name__)

EXTENSIONS = (".json", ".jsonl", ".parquet")
ARCHIVES = (".zip", ".gz", ".tgz", ".tar", ".bz2", ".xz")
REQUIRED = (Columns.OBS, Columns.ACTIONS, Columns.REWARDS, Columns.TERMINATEDS, Columns.TRUNCATEDS)
#: Per-step columns a learner's batch carries when every episode has them.
LEARNER_COLUMNS = (*REQUIRED, Columns.ACTION_LOGP, Columns.ACTION_DIST_INPUTS,
                   Columns.PREV_ACTIONS, Columns.PREV_REWARDS)
MAX_PROBLEMS_KEPT = 20  # skipped records named in the result; the rest only counted


class DatasetError(ConfigError):
    """An input that cannot train this run (no files, nothing readable, other spaces)."""


def resolve_files(source: str | list | tuple) -> list[Path]:
    """The data files of a directory (its *.json, *.jsonl and *.parquet), a glob, a file,
    or a list of those, sorted; DatasetError when there are none."""
    if isinstance(source, (list, tuple)):
        return sorted({p for s in source for p in resolve_files(s)})
    path = Path(str(source)).expanduser()
    if path.is_dir():
        files = [p for p in path.iterdir() if p.suffix in EXTENSIONS and p.is_file()]
    elif any(c in str(source) for c in "*?["):
        files = [Path(p) for p in glob.glob(str(path), recursive=True) if Path(p).is_file()]
    else:
        files = [path] if path.is_file() else []
    if not files and str(source).startswith("d4rl."):
        raise DatasetError(f"input {str(source)!r}: D4RL datasets are not supported (the d4rl "
                           "package needs the old gym and mujoco-py); convert its Minari port "
                           "(python -m rlmesh.offline.convert minari mujoco/hopper/medium-v0 "
                           "DIR) or give a folder of JSON-lines or Parquet files")
    if files and path.suffix in ARCHIVES:  # RLlib's tests read zipped JSON, e.g. enormous.zip
        raise DatasetError(f"input {str(source)!r}: an archive, which rlmesh does not read; "
                           f"unpack it and give the folder of {', '.join(EXTENSIONS)} files")
    if not files:
        raise DatasetError(f"input {str(source)!r}: no data files there (a directory of "
                           f"{', '.join(EXTENSIONS)} files, a glob, or a file)")
    return sorted(files)


def shard_files(files: list[Path], index: int, count: int) -> list[Path]:
    """Reader ``index`` of ``count`` reads every count-th file: disjoint, all covered."""
    if count > len(files):
        # More readers than files: each still reads something (a file may be read twice).
        return [files[index % len(files)]]
    return files[index::count]


class OfflineDataset:
    """The episodes of ``source`` (this reader's shard of it) held in memory, served in
    shuffled passes. ``num_skipped`` counts records that could not be read; ``problems``
    names the first of them (``path:line: why``)."""

    def __init__(self, source: Any, shard_index: int = 0, num_shards: int = 1,
                 shuffle: bool = True, seed: int | None = None, fmt: str | None = None) -> None:
        self.source = source
        self.files = shard_files(resolve_files(source), shard_index, num_shards)
        self.num_skipped = 0
        self.problems: list[str] = []
        self._fake_ids = itertools.count(-1, -1)
        records = [r for path in self.files for r in self._read(path, fmt)]
        self.episodes = join_episodes(records) if records else []
        if not self.episodes:
            first = f" (first problem: {self.problems[0]})" if self.problems else ""
            raise DatasetError(f"input {source!r}: no readable episode in "
                               f"{len(self.files)} file(s){first}")
        self.num_steps = sum(len(e[Columns.REWARDS]) for e in self.episodes)
        self.shuffle = shuffle
        self.rng = np.random.default_rng(seed)
        self._order: dict[str | None, list[int]] = {}

    def episodes_of(self, policy_id: str | None) -> list[int]:
        """Indices of the episodes (agent trajectories) of ``policy_id``; None: all."""
        if policy_id is None:
            return list(range(len(self.episodes)))
        return [i for i, e in enumerate(self.episodes)
                if POLICY_ID in e and str(e[POLICY_ID][0]) == policy_id]

    def _skip(self, where: str, why: str) -> None:
        self.num_skipped += 1
        if len(self.problems) < MAX_PROBLEMS_KEPT:
            self.problems.append(f"{where}: {why}")
        if self.num_skipped <= 3:
            log.warning("offline input: skipped %s: %s", where, why)

    def _read(self, path: Path, fmt: str | None) -> list[dict[str, np.ndarray]]:
        if (fmt or path.suffix.lstrip(".")) == "parquet":
            from rlmesh.offline.parquet_io import read_parquet_groups

            found: Any = read_parquet_groups(path)  # ("row group i", record or BadRecord)
        else:
            found = read_json(path)  # (line number, record or BadRecord)
        out = []
        for label, rec in found:
            where = f"{path}:{label}" if label else str(path)
            if isinstance(rec, BadRecord):
                self._skip(where, str(rec))
                continue
            try:
                out.append(self._checked(rec))
            except BadRecord as e:
                self._skip(where, str(e))
        return out

    def _checked(self, rec: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        missing = [k for k in REQUIRED if k not in rec]
        if missing:
            raise BadRecord(f"lacks column(s) {missing}")
        n = len(rec[Columns.REWARDS])
        uneven = [k for k, v in rec.items() if np.ndim(v) == 0 or len(v) != n]
        if uneven or n == 0:
            raise BadRecord(f"columns of other lengths than rewards ({n}): {uneven}" if uneven
                            else "no steps")
        for k in LEARNER_COLUMNS:
            if k in rec and rec[k].dtype.kind not in "biuf":
                raise BadRecord(f"column {k!r} is not numeric ({rec[k].dtype})")
            if k in rec and rec[k].dtype.kind == "f":
                if not np.isfinite(rec[k]).all():
                    raise BadRecord(f"column {k!r} has NaN or infinite values")
                rec[k] = rec[k].astype(np.float32, copy=False)  # JSON reads float64
        if Columns.EPS_ID not in rec:  # every record its own episode
            rec[Columns.EPS_ID] = np.full(n, next(self._fake_ids), np.int64)
        return rec

    def check_spaces(self, obs_space: gym.Space, action_space: gym.Space, env: Any,
                     policy_id: str | None = None) -> None:
        """DatasetError (one line) when the data (of ``policy_id``'s agents, if given) does
        not fit the run's spaces; else cast obs and actions to the layouts runners use."""
        episodes = [self.episodes[i] for i in self.episodes_of(policy_id)]
        if not episodes:
            have = sorted({str(e[POLICY_ID][0]) for e in self.episodes if POLICY_ID in e})
            raise DatasetError(f"input {self.source!r} has no steps of policy {policy_id!r} "
                               f"(its policy ids: {have}); map the agents to those ids")
        for key, space, what in ((Columns.OBS, obs_space, "observation"),
                                 (Columns.ACTIONS, action_space, "action")):
            layout = space_layout(space)
            shapes = {tuple(e[key].shape[1:]) for e in episodes}
            if shapes != {layout.shape}:
                raise DatasetError(
                    f"input {self.source!r} does not fit env {env!r}: its {key} have per-step "
                    f"shape {sorted(shapes)[0]}, the env's {what} space {space} needs "
                    f"{layout.shape}")
            if isinstance(space, gym.spaces.Discrete):
                values = np.concatenate([e[key] for e in episodes])
                bad = values[(values < space.start) | (values >= space.start + space.n)]
                if values.dtype.kind == "f" or len(bad):
                    raise DatasetError(
                        f"input {self.source!r} does not fit env {env!r}: {key} "
                        f"{bad[0] if len(bad) else values[0]!r} is not in {space}")
            for e in episodes:
                for k in (key, NEW_OBS) if key == Columns.OBS else (key,):
                    if k in e:
                        e[k] = e[k].astype(layout.dtype, copy=False)

    def sample_episodes(self, num_steps: int, policy_id: str | None = None
                        ) -> list[dict[str, np.ndarray]]:
        """Whole episodes (of ``policy_id``'s agents, if given), in shuffled passes over the
        dataset, until ``num_steps`` steps."""
        out, steps = [], 0
        while steps < num_steps:
            if not self._order.get(policy_id):
                order = np.array(self.episodes_of(policy_id))
                if self.shuffle:
                    self.rng.shuffle(order)
                self._order[policy_id] = list(order[::-1])
            e = self.episodes[self._order[policy_id].pop()]
            out.append(e)
            steps += len(e[Columns.REWARDS])
        return out

    def draw(self, n: int) -> list[dict[str, np.ndarray]]:
        """``n`` episodes drawn at random (with replacement when the data has fewer)."""
        index = self.rng.choice(len(self.episodes), n, replace=n > len(self.episodes))
        return [self.episodes[i] for i in index]

    def sample(self, num_steps: int, keys: list[str] | None = None,
               policy_id: str | None = None) -> dict[str, Any]:
        """A fragment as runners ship them (time-major, whole episodes) of >= num_steps;
        with ``policy_id``, of that policy's agents' trajectories, stamped with it."""
        episodes = self.sample_episodes(num_steps, policy_id)
        have = set.intersection(*(set(e) for e in episodes))
        columns = [k for k in (keys or LEARNER_COLUMNS) if k in have]
        columns += sorted(k for k in have if k.startswith("state_") and k not in columns)
        batch = batch_from_episodes(episodes, columns)
        batch["env_steps"] = int(batch[Columns.MASK].sum())
        batch["episodes"] = []
        if policy_id is not None:
            batch["policy_id"] = policy_id
        return batch

    def stats(self) -> dict[str, Any]:
        return {"num_records_skipped": self.num_skipped, "skipped": list(self.problems[:5]),
                "num_episodes": len(self.episodes), "num_steps": self.num_steps,
                "num_files": len(self.files)}


def open_input(config: AlgorithmConfig, spaces: dict[str | None, tuple[gym.Space, gym.Space]],
               first_file_only: bool = False) -> list[tuple[float, OfflineDataset | None]]:
    """``config.input`` as ``[(share of each train batch, dataset or None for the
    sampler)]``, every dataset read and checked (DatasetError) against ``spaces``:
    ``{policy_id: (obs space, action space)}`` of a multi-agent run, each policy's against
    its agents' steps, or ``{None: spaces}`` (every step). ``first_file_only``: only each
    source's first file is read, to check it (the env runners read the data)."""
    source = config.input_
    mix = source if isinstance(source, dict) else {"x": 1.0}
    options = dict(config.input_config)
    out = []
    for key, share in mix.items():
        where = key if isinstance(source, dict) else source
        if where == "sampler":
            out.append((float(share), None))
            continue
        shards = len(resolve_files(where)) if first_file_only else 1
        dataset = OfflineDataset(where, 0, shards, shuffle=options.get("shuffle", True),
                                 seed=config.seed, fmt=options.get("format"))
        for pid, (obs_space, action_space) in spaces.items():
            if not (first_file_only and pid is not None and not dataset.episodes_of(pid)):
                dataset.check_spaces(obs_space, action_space, config.env, pid)
        out.append((float(share), dataset))
    return out


def common_columns(fragments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fragments from several sources cut to the time-major columns they all have (data
    from another tool may lack action_logp), so that they merge into one batch."""
    if len(fragments) < 2:
        return fragments
    from rlmesh.rl.columns import time_major_keys

    shared = set.intersection(*(set(time_major_keys(f)) for f in fragments))
    return [{k: v for k, v in f.items() if k in shared or k not in time_major_keys(f)}
            for f in fragments]

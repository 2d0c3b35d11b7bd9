"""``output``: the writer each env runner owns. It turns the fragments the runner samples
into per-episode records and appends them to files of its own (no two runners share a
file, so nothing is locked), starting a new file past ``output_max_file_size``. Also
``EpisodeWriter``: episodes stepped one at a time into one named file (``rollout --out``)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlmesh.offline.json_io import JsonFile
from rlmesh.offline.records import (AGENT_ID, FragmentRecorder, MultiAgentRecorder,
                                    episode_record)
from rlmesh.rl.columns import Columns

if TYPE_CHECKING:
    from rlmesh.config.base import AlgorithmConfig

log = logging.getLogger(__name__)


class OutputWriter:
    """Writes fragments of runner ``worker_index`` under ``directory``."""

    def __init__(self, directory: str | Path, worker_index: int, fmt: str = "json",
                 max_file_size: int = 64 * 1024 * 1024,
                 compress_columns: list[str] | tuple[str, ...] = ()) -> None:
        self.directory = Path(directory).expanduser()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.worker_index = worker_index
        if fmt == "parquet":
            from rlmesh.offline.parquet_io import ParquetFile, _pa

            _pa()  # a missing pyarrow is one line at the runner's start, not mid-run
            self.file_class: Any = ParquetFile
        else:
            self.file_class = JsonFile
        self.max_file_size = max_file_size
        self.compress = frozenset(compress_columns)
        self.recorders: dict[str, FragmentRecorder] = {}
        self.multi_agent = MultiAgentRecorder()
        self.file: Any = None
        self.num_files = 0
        self.steps_written = 0
        self.paths: list[Path] = []

    @classmethod
    def from_config(cls, config: AlgorithmConfig, worker_index: int) -> "OutputWriter | None":
        """The writer ``config.output`` asks for, or None."""
        if not config.output:
            return None
        return cls(config.output, worker_index, config.output_format,
                   config.output_max_file_size, config.output_compress_columns)

    def write(self, fragment: dict[str, Any],
              owners: dict[str, list[tuple[int, Any]]] | None = None) -> None:
        """Append one fragment (of the policy its ``policy_id`` names). A multi-agent
        runner's (``policy_batches``) needs ``owners``, the (episode id, agent id) of each
        column (``MultiAgentSampler.last_owners``); in JSON it is one MultiAgentBatch line."""
        if "policy_batches" in fragment:
            batches = self.multi_agent.records(fragment, owners or {})
            if not any(batches.values()):
                return
            if self.file is None:
                self._open()
            if not hasattr(self.file, "write_multi_agent"):  # Parquet: flat rows, policy_id
                self.write_records([r for chunks in batches.values() for r in chunks])
                return
            size = self.file.write_multi_agent(batches, fragment.get("env_steps", 0))
            self.steps_written += sum(len(r["rewards"]) for c in batches.values() for r in c)
            if size >= self.max_file_size:
                self.close()
            return
        pid = fragment.get("policy_id", "default_policy")
        recorder = self.recorders.setdefault(pid, FragmentRecorder(pid))
        self.write_records(recorder.records(fragment))

    def write_records(self, records: list[dict[str, Any]]) -> None:
        """Append records (flat per-step columns of episode chunks, with eps_id)."""
        if not records:
            return
        if self.file is None:
            self._open()
        try:
            size = self.file.write(records)
        except ValueError as e:  # Parquet: columns changed; start a file for the new ones
            if type(e).__name__ != "SchemaChanged":
                raise
            self._open()
            size = self.file.write(records)
        self.steps_written += sum(len(r["rewards"]) for r in records)
        if size >= self.max_file_size:
            self.close()  # the next write opens the next file

    def _open(self) -> None:
        self.close()
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
        while True:  # a restarted runner of the same index may reuse a name: take the next
            name = (f"output-{stamp}_worker-{self.worker_index}_{self.num_files}"
                    f"{self.file_class.extension}")
            self.num_files += 1
            try:
                self.file = self.file_class(self.directory / name, self.compress)
                break
            except FileExistsError:
                continue
        self.paths.append(self.file.path)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


class EpisodeWriter:
    """Episodes stepped one at a time (``rlmesh rollout --out FILE``) into one file of the
    offline format: JSON lines in RLlib's SampleBatch form, or Parquet when the name ends
    in ``.parquet``; one record per episode. An existing file is never overwritten
    (FileExistsError)."""

    def __init__(self, path: str | Path, policy_id: str = "default_policy") -> None:
        self.path = Path(path).expanduser()
        if self.path.suffix == ".parquet":
            from rlmesh.offline.parquet_io import ParquetFile, _pa

            _pa()  # a missing pyarrow is one line before the first episode
            file_class: Any = ParquetFile
        else:
            file_class = JsonFile
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = file_class(self.path, frozenset())
        self.policy_id = policy_id
        self.num_episodes = self.num_steps = 0
        # Per agent (None: the single agent) its policy id and steps of the open episode.
        self._steps: dict[Any, tuple[str, list[dict[str, Any]]]] = {}

    def add_step(self, obs: Any, action: Any, reward: float, terminated: bool, truncated: bool,
                 new_obs: Any, extra: dict[str, Any] | None = None, agent: Any = None,
                 policy_id: str | None = None) -> None:
        """One step (obs and action in their column form); a single-agent episode's last
        writes it. A multi-agent env's steps name their ``agent`` and ``policy_id``, and
        ``end_episode`` writes the episode."""
        steps = self._steps.setdefault(agent, (policy_id or self.policy_id, []))[1]
        steps.append({"obs": obs, "actions": action, "rewards": reward,
                      "terminated": terminated, "truncated": truncated,
                      "new_obs": new_obs, **(extra or {})})
        if agent is None and (terminated or truncated):
            self.end_episode()

    def add_reward(self, agent: Any, reward: float) -> None:
        """A reward for ``agent`` between its steps (turn-based envs): onto its last step."""
        steps = self._steps.get(agent, (None, []))[1]
        if steps:
            steps[-1]["rewards"] += reward

    def end_episode(self, env_steps: int | None = None) -> None:
        """Write the episode stepped so far: one record per agent, all with one eps_id (a
        multi-agent episode in JSON: one MultiAgentBatch line of ``env_steps``). One cut
        short (``--steps``) ends with neither terminated nor truncated set: readers train
        on it as cut by the data."""
        if not self._steps:
            return
        eps_id, records = None, {}
        for index, (agent, (pid, steps)) in enumerate(self._steps.items()):
            cols = {k: np.stack([np.asarray(s[k]) for s in steps]) for k in steps[0]}
            base = ("obs", "actions", "rewards", "terminated", "truncated", "new_obs")
            record = episode_record(*(cols.pop(k) for k in base), extra=cols, policy_id=pid)
            eps_id = record[Columns.EPS_ID][0] if eps_id is None else eps_id
            record[Columns.EPS_ID][:] = eps_id
            record[Columns.AGENT_INDEX][:] = index
            if agent is not None:
                record[AGENT_ID] = np.array([str(agent)] * len(steps))
            records.setdefault(pid, []).append(record)
        flat = [r for rs in records.values() for r in rs]
        if None in self._steps or not hasattr(self.file, "write_multi_agent"):
            self.file.write(flat)
        else:
            self.file.write_multi_agent(records, env_steps or 0)
        self.num_episodes += 1
        self.num_steps += sum(len(r[Columns.REWARDS]) for r in flat)
        self._steps = {}

    def close(self) -> None:
        """Write a partial episode, then close the file (a Parquet file is readable only
        once closed)."""
        self.end_episode()
        self.file.close()

"""JSON lines in RLlib's SampleBatch format: one ``{"type": "SampleBatch", column: [...]}``
record per line (RLlib's JsonReader loads them), optional zlib-compressed columns, files
rotated by size; reading names every line it cannot use instead of failing."""

from __future__ import annotations

import base64
import json
import zlib
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from rlmesh.rl.columns import Columns
from rlmesh.offline.records import POLICY_ID

PACKED = "rlmesh_zlib_b64"  # a compressed column: {PACKED: data, "dtype": ..., "shape": ...}


class BadRecord(ValueError):
    """A record that cannot be read; the message says why (its path and line are added)."""


def encode(record: dict[str, np.ndarray], compress: frozenset[str] = frozenset()) -> str:
    """One JSON line (no newline) of a record."""
    out: dict[str, Any] = {"type": "SampleBatch"}
    for k, v in record.items():
        arr = np.asarray(v)
        if k in compress and arr.dtype.kind in "biuf":
            arr = np.ascontiguousarray(arr)
            out[k] = {PACKED: base64.b64encode(zlib.compress(arr.tobytes(), 1)).decode("ascii"),
                      "dtype": arr.dtype.str, "shape": list(arr.shape)}
        else:
            out[k] = arr.tolist()
    return json.dumps(out, separators=(",", ":"))


def encode_multi_agent(batches: dict[str, list[dict[str, np.ndarray]]], count: int,
                       compress: frozenset[str] = frozenset()) -> str:
    """One JSON line of RLlib's MultiAgentBatch form: ``{"type": "MultiAgentBatch",
    "count": env steps, "policy_batches": {policy_id: {column: [...]}}}``, each policy's
    batch its agents' chunks one after the other."""
    out: dict[str, Any] = {"type": "MultiAgentBatch", "count": int(count), "policy_batches": {}}
    for pid, chunks in batches.items():
        if chunks:
            joined = {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}
            body = json.loads(encode(joined, compress))
            del body["type"]
            out["policy_batches"][pid] = body
    return json.dumps(out, separators=(",", ":"))


def decode(line: str) -> list[dict[str, np.ndarray]]:
    """The records of one line: one for a SampleBatch (a line without "type" is read as
    one), one per policy for RLlib's MultiAgentBatch, each with a policy_id column."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as e:
        raise BadRecord(f"not JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(data, dict):
        raise BadRecord(f"a JSON {type(data).__name__}, not a record")
    kind = data.pop("type", "SampleBatch")
    if kind == "MultiAgentBatch":
        batches = data.get("policy_batches")
        if not isinstance(batches, dict):
            raise BadRecord("a MultiAgentBatch without policy_batches")
        return [_columns(b, pid) for pid, b in batches.items()]
    if kind != "SampleBatch":
        raise BadRecord(f"unknown record type {kind!r} (expected 'SampleBatch' or "
                        "'MultiAgentBatch')")
    return [_columns(data, None)]


def _columns(data: Any, policy_id: str | None) -> dict[str, np.ndarray]:
    if not isinstance(data, dict):
        raise BadRecord("a batch that is not a JSON object")
    rec = {}
    for k, v in data.items():
        if k == Columns.INFOS:
            continue  # free-form dicts: nothing a learner reads
        if isinstance(v, str):
            raise BadRecord(f"column {k!r} is RLlib-compressed (pickled); rlmesh never "
                            "unpickles data: write it with output_compress_columns=[]")
        if isinstance(v, dict) and PACKED in v:
            try:
                raw = zlib.decompress(base64.b64decode(v[PACKED]))
                rec[k] = np.frombuffer(raw, np.dtype(v["dtype"])).reshape(v["shape"])
            except (ValueError, TypeError, KeyError, zlib.error) as e:
                raise BadRecord(f"column {k!r}: corrupt compressed data ({e})") from None
            continue
        try:
            rec[k] = np.asarray(v)
        except ValueError:
            raise BadRecord(f"column {k!r} is ragged (steps of different shapes)") from None
        if rec[k].dtype == object:
            raise BadRecord(f"column {k!r} holds values that are not numbers or strings")
    if "dones" in rec and Columns.TERMINATEDS not in rec:  # RLlib before 2.3
        rec[Columns.TERMINATEDS] = rec["dones"]
        rec.setdefault(Columns.TRUNCATEDS, np.zeros_like(rec["dones"]))
    if policy_id is not None:
        rec[POLICY_ID] = np.array([policy_id] * len(rec.get(Columns.REWARDS, ())))
    return rec


def read_json(path: Path) -> Iterator[tuple[int, dict[str, np.ndarray] | BadRecord]]:
    """``(line number, record or BadRecord)`` for each non-empty line of ``path``."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                yield number, BadRecord("not UTF-8 text")
                continue
            if not line:
                continue
            try:
                for rec in decode(line):
                    yield number, rec
            except BadRecord as e:
                yield number, e


class JsonFile:
    """One open output file of a writer: lines appended, flushed after each write (a run
    that dies leaves every line complete but maybe the last)."""

    extension = ".json"

    def __init__(self, path: Path, compress: frozenset[str]) -> None:
        self.path = path
        self.compress = compress
        self.file = open(path, "x", encoding="utf-8")  # "x": never another writer's file

    def write(self, records: list[dict[str, np.ndarray]]) -> int:
        self.file.write("".join(encode(r, self.compress) + "\n" for r in records))
        self.file.flush()
        return self.file.tell()

    def write_multi_agent(self, batches: dict[str, list[dict[str, np.ndarray]]],
                          count: int) -> int:
        """One MultiAgentBatch line of a multi-agent runner's fragment."""
        self.file.write(encode_multi_agent(batches, count, self.compress) + "\n")
        self.file.flush()
        return self.file.tell()

    def close(self) -> None:
        self.file.close()


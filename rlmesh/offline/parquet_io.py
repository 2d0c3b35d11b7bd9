"""Parquet output and input (pyarrow, the ``data`` extra): one row per step, a column per
sample column (steps of more than one number as fixed-size lists, their shape in the
schema's metadata), zstd-compressed; each write is a row group."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from rlmesh.extras import require
from rlmesh.offline.json_io import BadRecord

SHAPES = b"rlmesh.shapes"  # schema metadata: {column: per-step shape}


class SchemaChanged(ValueError):
    """The records to write have other columns than the open file."""


def _pa() -> tuple[Any, Any]:
    pa = require("pyarrow", "data", "Parquet offline data")
    return pa, require("pyarrow.parquet", "data", "Parquet offline data")


def to_table(records: list[dict[str, np.ndarray]]) -> Any:
    pa, _ = _pa()
    keys = [k for k in records[0] if all(k in r for r in records)]
    arrays, shapes = [], {}
    for k in keys:
        col = np.concatenate([np.asarray(r[k]) for r in records])
        shapes[k] = list(col.shape[1:])
        if col.ndim > 1:
            flat = pa.array(np.ascontiguousarray(col).reshape(-1))
            arrays.append(pa.FixedSizeListArray.from_arrays(flat, int(np.prod(col.shape[1:]))))
        else:
            arrays.append(pa.array(col))
    schema = pa.schema([pa.field(k, a.type) for k, a in zip(keys, arrays)],
                       metadata={SHAPES: json.dumps(shapes).encode()})
    return pa.Table.from_arrays(arrays, schema=schema)


def read_parquet(path: Path) -> dict[str, np.ndarray]:
    """The file's steps as one record (it may hold many episodes: join them by eps_id)."""
    _, pq = _pa()
    table = pq.read_table(path)
    return _record(table, json.loads((table.schema.metadata or {}).get(SHAPES, b"{}")))


def read_parquet_groups(path: Path) -> Iterator[tuple[str, dict[str, np.ndarray] | BadRecord]]:
    """``("row group i", record or BadRecord)`` for each row group of ``path`` (each write
    of a runner's is one): a corrupt group is skipped, the others kept. A file that cannot
    be opened (cut short, its footer lost) is one BadRecord labelled ``""``."""
    _, pq = _pa()
    try:
        file = pq.ParquetFile(path)
    except (OSError, ValueError) as e:  # pyarrow's errors derive from these
        yield "", BadRecord(f"unreadable Parquet file ({_first_line(e)})")
        return
    shapes = json.loads((file.schema_arrow.metadata or {}).get(SHAPES, b"{}"))
    for i in range(file.num_row_groups):
        try:
            table = file.read_row_group(i)
        except (OSError, ValueError) as e:
            yield f"row group {i}", BadRecord(f"unreadable row group ({_first_line(e)})")
            continue
        yield f"row group {i}", _record(table, shapes)


def _first_line(e: BaseException) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0]


def _record(table: Any, shapes: dict[str, list[int]]) -> dict[str, np.ndarray]:
    rec = {}
    for name in table.column_names:
        col = table.column(name).combine_chunks()
        shape = shapes.get(name, [])
        if shape:
            values = col.values.to_numpy(zero_copy_only=False)
            rec[name] = values.reshape(len(col), *shape)
        else:
            rec[name] = col.to_numpy(zero_copy_only=False)
        if rec[name].dtype == object:  # strings (policy_id)
            rec[name] = rec[name].astype(str)
    return rec


class ParquetFile:
    """One open Parquet output file; each write adds a row group. A file is readable only
    once closed (its footer): the writer closes it on rotation and when the runner stops."""

    extension = ".parquet"

    def __init__(self, path: Path, compress: frozenset[str]) -> None:
        self.path = path
        self.writer: Any = None
        self.file = open(path, "xb")  # "x": never another writer's file

    def write(self, records: list[dict[str, np.ndarray]]) -> int:
        _, pq = _pa()
        table = to_table(records)
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.file, table.schema, compression="zstd")
        elif not table.schema.equals(self.writer.schema, check_metadata=False):
            # Other columns than this file's (a policy's extra output first seen): the
            # writer starts a new file for them.
            raise SchemaChanged(f"{self.path}: columns changed")
        self.writer.write_table(table)
        return self.file.tell()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.file.close()

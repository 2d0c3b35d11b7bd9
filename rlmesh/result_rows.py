"""The rows of a trial's result files (result.json, progress.csv) past the checkpoint a run
resumes from: the resumed run does those iterations again, and each iteration keeps one row."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any


def drop_rows_after(result_path: Path, progress_path: Path, iteration: int) -> None:
    """Keep the rows of result.json and progress.csv up to ``iteration`` (and drop a line a
    kill cut short), each file replaced whole, never half written."""
    def kept(value: Any) -> bool:  # a number in result.json, its text in progress.csv
        try:
            return float(value) <= iteration
        except (TypeError, ValueError):
            return False

    if result_path.exists():
        lines = []
        for line in result_path.read_text(encoding="utf-8").splitlines():
            try:
                if kept(json.loads(line).get("training_iteration")):
                    lines.append(line + "\n")
            except (ValueError, AttributeError):  # the half line of a killed run
                continue
        _replace(result_path, "".join(lines))
    if progress_path.exists():
        with open(progress_path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            rows = [r for r in reader if kept(r.get("training_iteration"))]
            columns = reader.fieldnames or []
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(rows)
        _replace(progress_path, out.getvalue())


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8", newline="")
    os.replace(tmp, path)

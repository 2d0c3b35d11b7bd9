"""mkdocs hook: api/settings.md, every config key of every algorithm with its default and doc.

The docs of the settings live in the dataclass fields' metadata (``setting(..., doc=...)``),
which mkdocstrings does not read; this page is made from the same fields_table() that
``rlmesh train --config-help`` prints, so it cannot drift from the code."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mkdocs.structure.files import File

_INTRO = """# Settings

Every config key, generated from the config classes at build time (the same table as
`rlmesh train --run ALGO --config-help`). The keys every algorithm shares come first, by
builder group (`.training(...)`, `.env_runners(...)`, ...); then each algorithm's own keys,
and the shared keys whose default it changes.
"""


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _default(value) -> str:
    from rlmesh.results import to_jsonable

    text = json.dumps(to_jsonable(value))
    return f"`{_cell(text if len(text) <= 60 else text[:57] + '...')}`"


def _table(rows, values) -> list[str]:
    out = ["| key | type | default | doc |", "| --- | --- | --- | --- |"]
    for r in rows:
        also = f" (also: {', '.join(f'`{a}`' for a in r.aliases)})" if r.aliases else ""
        out.append(f"| `{r.key}` | {_cell(r.type)} | {_default(values[r.name])} | "
                   f"{_cell(r.doc)}{also} |")
    return out + [""]


def settings_page() -> str:
    from rlmesh.config.base import GROUPS, AlgorithmConfig
    from rlmesh.driver.algorithm_registry import ALGORITHMS, get_config_class

    base = AlgorithmConfig()
    base_rows = AlgorithmConfig.fields_table()
    base_values = {r.name: getattr(base, r.name) for r in base_rows}
    out = [_INTRO, "## Shared by every algorithm", ""]
    for group in GROUPS:
        rows = [r for r in base_rows if r.group == group]
        if rows:
            out += [f"### {group}", "", *_table(rows, base_values)]
    for run in ALGORITHMS:
        cls = get_config_class(run)
        config = cls()
        values = {r.name: getattr(config, r.name) for r in cls.fields_table()}
        rows = [r for r in cls.fields_table()
                if r.name not in base_values or repr(values[r.name]) != repr(base_values[r.name])]
        out += [f"## {run}", "", f"`{cls.__module__}.{cls.__name__}`", ""]
        out += _table(rows, values) if rows else ["Only the shared keys, with their defaults.", ""]
    return "\n".join(out)


def on_files(files, config):
    # The checkout being documented, not whichever rlmesh the venv has installed.
    root = str(Path(config["config_file_path"]).parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    files.append(File.generated(config, "api/settings.md", content=settings_page()))
    return files

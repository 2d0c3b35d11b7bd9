"""mkdocs hook: README.md, the repository's front page, becomes the site's readme.md page.

README links into docs/ as ``docs/x.md`` (right on GitHub); on the site the page sits beside
those pages, so the ``docs/`` prefix is dropped. The README stays the one source."""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File

_DOCS_LINK = re.compile(r"\]\(docs/")


def on_files(files, config):
    readme = Path(config["config_file_path"]).parent / "README.md"
    text = _DOCS_LINK.sub("](", readme.read_text(encoding="utf-8"))
    files.append(File.generated(config, "readme.md", content=text))
    return files

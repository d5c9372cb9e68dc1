"""The ``package.Name`` references the README and the docs make (standard library only).

Read by tests/docs/test_site.py (resolved in the sources) and
tests/core/test_documented_names.py (imported where installed).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: A dotted name of ours (``genlm_hf.AsyncTransformer``); file names are left out.
DOTTED = re.compile(r"\b(genlm_[a-z_]+(?:\.[A-Za-z_]\w*)+)")
FILE_SUFFIXES = ("py", "md", "toml")


def documented_names() -> dict[str, Path]:
    """Each dotted name the README, docs/ and the plugins' READMEs mention -> a page."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    pages += sorted((ROOT / "plugins").glob("*/README.md"))
    return {
        name: page
        for page in pages
        for name in DOTTED.findall(page.read_text())
        if name.rsplit(".", 1)[1] not in FILE_SUFFIXES
    }

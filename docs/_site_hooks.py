"""mkdocs hooks for the documentation site (mkdocs.yml ``hooks:``).

The home page includes the repository's README, whose links are relative to the
repository root (``docs/bytes.md``); on the site that page lives in ``docs/``, so those
links lose their ``docs/`` prefix. Links to files outside ``docs/`` (examples, plugins)
point to the repository's copy, which the site does not hold: they become plain text
with the path, so no link on the site is broken.
"""

from __future__ import annotations

import re
from pathlib import Path

_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001
    """The home page: the README, its repository-relative links rewritten."""
    if page.file.src_uri != "index.md":
        return markdown
    markdown = (Path(config["config_file_path"]).parent / "README.md").read_text()

    def relink(match: re.Match) -> str:
        text, target = match.groups()
        if target.startswith(("http://", "https://", "#", "mailto:")):
            return match.group(0)
        if target.startswith("docs/"):
            return f"[{text}]({target.removeprefix('docs/')})"
        return f"{text} (`{target}` in the repository)" if text != f"`{target}`" else text

    return _LINK.sub(relink, markdown)

"""The documentation site renders: every public name of each package on its API page.

``nox -s docs`` builds the site into ``site/`` (mkdocs, warnings as errors) and then runs
this file, which opens each API page in headless Chromium (as a reader's browser would,
scripts run) and checks that every name in the package's ``__all__`` is rendered as a
heading of its own. The names are read from the sources with ``ast``, so the packages
(and their engines) need not be installed here.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "site"
#: Package -> its ``__init__``; each has a page ``site/api/<package with _>/``.
PACKAGES = {
    "genlm_core": "genlm_core/__init__.py",
    "genlm_bytelm": "plugins/genlm_bytelm/src/genlm_bytelm/__init__.py",
    "genlm_trie_numba": "plugins/genlm_trie_numba/src/genlm_trie_numba/__init__.py",
    "genlm_trie_torch": "plugins/genlm_trie_torch/src/genlm_trie_torch/__init__.py",
    "genlm_backend_kit": "plugins/genlm_backend_kit/src/genlm_backend_kit/__init__.py",
    "genlm_assets": "genlm_assets/__init__.py",
    "genlm_hf": "plugins/genlm_hf/src/genlm_hf/__init__.py",
    "genlm_vllm": "plugins/genlm_vllm/src/genlm_vllm/__init__.py",
    "genlm_mlx": "plugins/genlm_mlx/src/genlm_mlx/__init__.py",
    "genlm_sgl": "plugins/genlm_sgl/src/genlm_sgl/__init__.py",
}
#: How the machine's sandbox lets Chromium run headless and offline (no GPU, no sync).
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def public_names(init: Path) -> list[str]:
    """The non-underscore names of the module's ``__all__``, read without importing it."""
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return [n for n in ast.literal_eval(node.value) if not n.startswith("_")]
    raise AssertionError(f"{init} has no __all__")


class Headings(HTMLParser):
    """Ids of the rendered page's headings, with their text."""

    def __init__(self) -> None:
        super().__init__()
        self.text: dict[str, str] = {}
        self._open: str | None = None

    def handle_starttag(self, tag, attrs):
        if tag in ("h1", "h2", "h3", "h4") and dict(attrs).get("id"):
            self._open = dict(attrs)["id"]
            self.text[self._open] = ""

    def handle_endtag(self, tag):
        if tag in ("h1", "h2", "h3", "h4"):
            self._open = None

    def handle_data(self, data):
        if self._open is not None:
            self.text[self._open] += data


@pytest.fixture(scope="module")
def chromium(tmp_path_factory):
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("headless Chromium is needed: nox -s docs installs Debian's chromium")
    profile = tmp_path_factory.mktemp("chromium-profile")

    def render(page: Path) -> str:
        done = subprocess.run(
            [path, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    return render


@pytest.mark.parametrize("package", PACKAGES)
def test_api_page_renders_every_public_name(chromium, package):
    page = SITE / "api" / package.replace(".", "_") / "index.html"
    assert page.is_file(), f"{page} is missing: build the site first (nox -s docs)"
    headings = Headings()
    headings.feed(chromium(page))
    assert headings.text, f"Chromium rendered no headings from {page}"
    missing = [
        name
        for name in public_names(ROOT / PACKAGES[package])
        if name not in headings.text.get(f"{package}.{name}", "")
    ]
    assert missing == [], f"{page} does not render {missing}"


def test_home_page_is_the_readme(chromium):
    dom = chromium(SITE / "index.html")
    first_line = (ROOT / "README.md").read_text().splitlines()[0].lstrip("# ").strip()
    assert first_line in dom
    assert 'href="bytes/"' in dom  # the README's docs/bytes.md link, made a site link

"""The documentation site renders: every public name of each package on its API page.

``nox -s docs`` builds the site into ``site/`` (mkdocs, warnings as errors) and then runs
this file, which opens each API page in headless Chromium (as a reader's browser would,
scripts run) and checks that every name in the package's ``__all__`` is rendered as a
heading of its own. The names are read from the sources with ``ast``, so the packages
(and their engines) need not be installed here.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from documented_names import documented_names

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "site"
#: Package -> its ``__init__``; each has a page ``site/api/<package>.html``.
PACKAGES = {
    "genlm_core": "genlm_core/__init__.py",
    **{
        f"genlm_core.{sub}": f"genlm_core/{sub}/__init__.py"
        for sub in ("lm", "runtime", "loading", "plugins", "trie", "tokenization", "testing")
    },
    "genlm_core.errors": "genlm_core/errors.py",
    "genlm_core.checks": "genlm_core/checks.py",
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
    page = SITE / "api" / f"{package}.html"
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
    assert 'href="bytes.html"' in dom  # the README's docs/bytes.md link, made a site link


#: A Sphinx role left in a docstring prints as text (":meth:" then the code).
RAW_ROLE = re.compile(r":(meth|class|func|attr|data|mod|exc|obj):")


@pytest.mark.parametrize("package", PACKAGES)
def test_api_page_has_no_raw_role_and_is_not_empty(chromium, package):
    page = SITE / "api" / f"{package}.html"
    dom = chromium(page)
    headings = Headings()
    headings.feed(dom)
    rendered = [h for h in headings.text if h.startswith(f"{package}.")]
    assert rendered, f"{page} renders no public name of {package}"
    text = re.sub(r"<[^>]+>", "", dom)
    assert not RAW_ROLE.search(text), f"{page} prints a raw role: {RAW_ROLE.search(text)}"


class Links(HTMLParser):
    """The ``href`` of every link on a page."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a" and dict(attrs).get("href"):
            self.hrefs.append(dict(attrs)["href"])


def test_a_link_followed_from_the_home_page_opened_from_disk_lands_on_its_page(chromium):
    """The README says to open site/index.html: its links must be pages, not folders."""
    links = Links()
    links.feed(chromium(SITE / "index.html"))
    local = [h for h in links.hrefs if not h.startswith(("http:", "https:", "#", "mailto:"))]
    folders = [h for h in local if h.split("#")[0].endswith("/")]
    assert not folders, f"folder links show a file listing from disk: {folders}"
    target = (SITE / "bytes.html").resolve()
    (href,) = {h for h in local if (SITE / h.split("#")[0]).resolve() == target}
    headings = Headings()
    headings.feed(chromium(SITE / href.split("#")[0]))
    assert any("Byte-level" in text for text in headings.text.values()), headings.text


#: Where the packages' sources are (read statically: this session installs none of them).
SOURCES = [ROOT, *sorted((ROOT / "plugins").glob("*/src")), ROOT / "tests/plugins/genlm_dummy/src"]
#: Import paths kept for migration: an alias module, and what it stands for.
ALIASES = {"genlm_core.bytes": "genlm_bytelm", "genlm_core.backend_kit": "genlm_backend_kit"}


def test_every_dotted_name_the_docs_mention_exists():
    """README, docs/ and the plugins' READMEs: each ``package.Name`` resolves in the sources."""
    import griffe

    mentioned = documented_names()
    loader = griffe.GriffeLoader(search_paths=[str(p) for p in SOURCES])
    missing = []
    for name, page in sorted(mentioned.items()):
        for alias, real in ALIASES.items():
            if name == alias or name.startswith(alias + "."):
                name = real + name[len(alias) :]
        top, *parts = name.split(".")
        try:
            obj = loader.load(top)
            for part in parts:
                obj = obj[part]
        except (KeyError, ImportError, griffe.AliasResolutionError) as error:
            missing.append(f"{page.relative_to(ROOT)}: {name} ({type(error).__name__})")
    assert not missing, missing


#: The sections of every backend's page, in this order (more may follow).
BACKEND_TEMPLATE = [
    "Install", "Use", "Options", "Devices", "LoRA adapters", "Limits", "How it works"
]  # fmt: skip


def test_every_official_backend_has_a_page_from_the_one_template():
    import tomllib

    table = tomllib.loads((ROOT / "genlm_core/plugins/official.toml").read_text())
    for name in table:
        page = ROOT / "docs" / "backends" / f"{name}.md"
        assert page.is_file(), f"official backend {name!r} has no page: write {page}"
        sections = re.findall(r"^## (.+)$", page.read_text(), re.MULTILINE)
        assert sections[: len(BACKEND_TEMPLATE)] == BACKEND_TEMPLATE, (page.name, sections)


#: The pages for users (the site's "Use" section): guides, not measurement logs.
USER_PAGES = ["guide.md", "bytes.md", "gpu.md", "migrating.md", "backends/*.md"]
#: What marks a measurement log: a run's date, or the machine's load during it.
MEASUREMENT_LOG = re.compile(r"\b20\d\d-\d\d-\d\d\b|\bload (average )?~?\d")


def test_the_guides_hold_no_measurement_logs():
    """Dated runs and their machine's load belong in docs/reports/, linked from the guide."""
    pages = [p for pattern in USER_PAGES for p in sorted((ROOT / "docs").glob(pattern))]
    logs = [
        f"{page.relative_to(ROOT)}:{n}: {line.strip()[:80]}"
        for page in pages
        for n, line in enumerate(page.read_text().splitlines(), 1)
        if MEASUREMENT_LOG.search(line)
    ]
    assert not logs, logs

"""The plugin pages stay true: every Python and TOML block is a file, an excerpt, or run here.

The pages are docs/plugin-quickstart.md (the whole example plugin, at most 150 lines)
and docs/plugins.md (the reference).

A block is preceded by one of ``<!-- file: PATH -->`` (the block is that whole file),
``<!-- excerpt: PATH -->`` (the block appears in that file) or ``<!-- test: NAME -->``
(the block is executed by the test of that name below). Other shell blocks and
``text`` blocks (a folder listing) are exempt.

``test_the_example_builds_from_the_page_alone`` follows the page as a plugin author
would: the example's files from the page's text in an empty folder, installed into a
fresh virtual environment with the pip that ships with Python (23.x for 3.11: no
``--group``) by the page's commands, and its tests run there (~1-3 min, mostly
installing torch).
"""

from __future__ import annotations

import ensurepip
import math
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from session_requires import require

from genlm_core.loading import resolve_backend
from genlm_core.plugins import Availability, BackendSpec, hookimpl
from genlm_core.testing import LoraConformance

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "docs" / "plugin-quickstart.md"
DOCS = (QUICKSTART, ROOT / "docs" / "plugins.md")
#: The quickstart's length: the backend, its entry points, the conformance suite (150),
#: and the trie module its pyproject registers (issue 43: the page is the whole plugin).
QUICKSTART_LINES = 175
EXAMPLE = ROOT / "tests" / "plugins" / "genlm_dummy"
BLOCK = re.compile(r"(?:<!-- (file|excerpt|test): (\S+) -->\n)?```(\w*)\n(.*?)```", re.DOTALL)


def blocks(pages=DOCS) -> list[tuple[str | None, str | None, str, str]]:
    return [m.groups() for page in pages for m in BLOCK.finditer(page.read_text())]


def code_block(name: str) -> str:
    (body,) = [body for kind, arg, _, body in blocks() if (kind, arg) == ("test", name)]
    return body


def test_the_quickstart_is_short_and_holds_the_backend():
    lines = QUICKSTART.read_text().splitlines()
    assert len(lines) <= QUICKSTART_LINES, f"{len(lines)} lines; the bar is {QUICKSTART_LINES}"
    quoted = {arg for kind, arg, _, _ in blocks((QUICKSTART,)) if kind == "file"}
    example = [p.relative_to(EXAMPLE).as_posix() for p in EXAMPLE.rglob("*") if p.is_file()]
    for name in [n for n in example if n.endswith((".py", ".toml")) and "__pycache__" not in n]:
        assert str((EXAMPLE / name).relative_to(ROOT)) in quoted


def test_every_code_block_is_checked():
    unchecked = [
        body[:60]
        for kind, _, lang, body in blocks()
        if kind is None and lang not in ("bash", "text")
    ]
    assert unchecked == []
    files = {arg for kind, arg, _, _ in blocks() if kind == "file"}
    example = {str(p.relative_to(ROOT)) for p in EXAMPLE.rglob("*") if p.is_file()}
    example -= {str((EXAMPLE / "src/genlm_dummy/py.typed").relative_to(ROOT))}  # empty
    assert example <= files  # the page holds the whole example


@pytest.mark.parametrize(
    "kind, path, body",
    [pytest.param(k, a, b, id=f"{k}:{a}") for k, a, _, b in blocks() if k in ("file", "excerpt")],
)
def test_quoted_code_matches_the_files(kind, path, body):
    text = (ROOT / path).read_text()
    if kind == "file":
        assert body == text
    else:
        assert body.strip() in text


def test_usage_example():
    require("genlm_dummy", reason="genlm-dummy is not installed")
    namespace: dict = {}
    exec(code_block("usage"), namespace)
    lm = namespace["lm"]
    out = lm.next_token_logprobs_sync([ord("a")])
    expected = torch.full_like(out, math.log(1 / 259))
    expected[ord("b")] = math.log(3 / 259)
    torch.testing.assert_close(out, expected)
    lm.cleanup()


class TestLoraHooksExample(LoraConformance):
    """The page's LoRA example passes the shipped LoRA suite."""

    @pytest.fixture
    def lm(self):
        pytest.importorskip("genlm_dummy", reason="genlm-dummy is not installed")
        namespace: dict = {}
        exec(code_block("lora-hooks"), namespace)
        model = namespace["AdaptedBigramLM"](b"The capital of France is Paris. Hello, world!")
        yield model
        model.cleanup()

    @pytest.fixture
    def lora_adapters(self, tmp_path):
        texts = {"v1": b"oooo dddd ssss 3333 hello world", "v2": b"o!d!s!3!o?d?s?3?"}
        for name, text in texts.items():
            (tmp_path / name).write_bytes(text)
        return str(tmp_path / "v1"), str(tmp_path / "v2")


class TwoEngines:
    """vllm and hf, both available and automatic, as on a GPU machine."""

    @hookimpl
    def genlm_register_backends(self, register):
        loader = "genlm_core.testing.mock:MockAsyncLM.from_name"
        for name, priority in (("vllm", 100), ("hf", 50)):
            register(BackendSpec(name, loader, priority, check=lambda: Availability.yes()))


def test_select_hook_example(plugin_manager, register_plugin):
    module = types.ModuleType("docs_select_hook")
    exec(code_block("select-hook"), module.__dict__)
    register_plugin(TwoEngines())
    assert resolve_backend("meta-llama/Llama-3.1-8B", plugin_manager=plugin_manager).name == "vllm"
    register_plugin(module)
    small = resolve_backend("HuggingFaceTB/SmolLM2-135M", plugin_manager=plugin_manager)
    assert small.name == "hf"
    assert resolve_backend("meta-llama/Llama-3.1-8B", plugin_manager=plugin_manager).name == "vllm"


def test_the_example_builds_from_the_page_alone(tmp_path):
    project = tmp_path / "genlm-dummy"
    prefix = str(EXAMPLE.relative_to(ROOT)) + "/"
    for kind, path, _, body in blocks((QUICKSTART,)):  # the quickstart alone
        if kind == "file" and path.startswith(prefix):
            target = project / path.removeprefix(prefix)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(body)
    script = "set -euo pipefail\n" + code_block("install").replace("/path/to/genlm-core", str(ROOT))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GENLM_", "VIRTUAL_ENV"))}
    env["PATH"] = os.pathsep.join(
        p for p in env["PATH"].split(os.pathsep) if not p.startswith(sys.prefix)
    )
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    pip = subprocess.run(
        [str(project / ".venv" / "bin" / "pip"), "--version"], capture_output=True, text=True
    )
    assert pip.stdout.startswith(f"pip {ensurepip.version()} ")  # the pip Python ships
    summary = re.search(r"(\d+) passed in", done.stdout)
    assert summary and int(summary[1]) >= 20 and "failed" not in done.stdout, done.stdout
    assert re.search(r"dummy +available .*\[genlm-dummy 0\.1\.0\]", done.stdout)
    assert "dummy-trie" in done.stdout

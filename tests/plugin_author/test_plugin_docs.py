"""docs/plugins.md stays true: every Python and TOML block is a file, an excerpt, or run here.

A block is preceded by one of ``<!-- file: PATH -->`` (the block is that whole file),
``<!-- excerpt: PATH -->`` (the block appears in that file) or ``<!-- test: NAME -->``
(the block is executed by the test of that name below). Shell blocks are exempt.
"""

from __future__ import annotations

import math
import re
import types
from pathlib import Path

import pytest
import torch

from genlm_core.loading import resolve_backend
from genlm_core.plugins import Availability, BackendSpec, hookimpl

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "plugins.md"
BLOCK = re.compile(r"(?:<!-- (file|excerpt|test): (\S+) -->\n)?```(\w*)\n(.*?)```", re.DOTALL)


def blocks() -> list[tuple[str | None, str | None, str, str]]:
    return [m.groups() for m in BLOCK.finditer(DOC.read_text())]


def code_block(name: str) -> str:
    (body,) = [body for kind, arg, _, body in blocks() if (kind, arg) == ("test", name)]
    return body


def test_every_code_block_is_checked():
    unchecked = [body[:60] for kind, _, lang, body in blocks() if kind is None and lang != "bash"]
    assert unchecked == []
    files = {arg for kind, arg, _, _ in blocks() if kind == "file"}
    assert {
        "tests/plugins/genlm_dummy/pyproject.toml",
        "tests/plugins/genlm_dummy/src/genlm_dummy/_plugin.py",
        "tests/plugins/genlm_dummy/src/genlm_dummy/lm.py",
    } <= files


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
    pytest.importorskip("genlm_dummy", reason="genlm-dummy is not installed")
    namespace: dict = {}
    exec(code_block("usage"), namespace)
    lm = namespace["lm"]
    out = lm.next_token_logprobs_sync([ord("a")])
    expected = torch.full_like(out, math.log(1 / 259))
    expected[ord("b")] = math.log(3 / 259)
    torch.testing.assert_close(out, expected)
    lm.cleanup()


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

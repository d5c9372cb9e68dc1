"""Every public method of genlm-backend 0.3.1's model classes is kept, or documented.

``tests/shared/genlm_backend_api.py`` writes genlm-backend's methods out; this checks
that table against genlm-backend 0.3.1's own source, and the core's classes (the base,
the mock) against the table. Each backend's tests check its model class the same way.
"""

import ast
import importlib.util
from pathlib import Path

import pytest
from genlm_backend_api import METHODS, NOT_KEPT, missing, public_methods

from genlm_core.lm import AsyncLMBase
from genlm_core.testing.mock import MockAsyncLM

DOCS = Path(__file__).resolve().parents[2] / "docs" / "migrating.md"


def _their_methods():
    """Public methods of genlm-backend 0.3.1's model classes, read from its source."""
    spec = importlib.util.find_spec("genlm.backend")
    folder = Path(next(iter(spec.submodule_search_locations))) / "llm"
    found = {}
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef) or node.name not in METHODS:
                continue
            bases = [getattr(b, "id", None) for b in node.bases]
            if node.name in found and not bases:
                continue  # the placeholder defined when an engine is absent
            names = {
                n.name
                for n in node.body
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                and not n.name.startswith("_")
            }
            found[node.name] = (bases, names)
    base = found["AsyncLM"][1]
    return {
        name: names | (base if "AsyncLM" in bases else set())
        for name, (bases, names) in found.items()
    }


def test_the_table_is_genlm_backends():
    assert {name: set(m) for name, m in METHODS.items()} == _their_methods()


def test_the_base_class_keeps_them():
    assert missing("AsyncLM", AsyncLMBase) == set()


def test_the_mock_keeps_them():
    assert missing("MockAsyncLM", MockAsyncLM) == set()


def test_what_is_not_kept_is_really_absent_and_documented():
    ours = {"AsyncLM": AsyncLMBase}
    docs = DOCS.read_text()
    for owner, method in NOT_KEPT:
        if owner in ours:
            assert method not in public_methods(ours[owner]), (owner, method, "kept: drop it")
        assert f"`{owner}.{method}`" in docs, f"docs/migrating.md does not name {owner}.{method}"


def test_the_kept_methods_behave_as_genlm_backends(tokenizer_of):
    from genlm.backend.llm import MockAsyncLM as TheirMock

    tokenizer = tokenizer_of("gpt2-npm")
    theirs, ours = TheirMock(tokenizer), MockAsyncLM(tokenizer)
    try:
        for call in (lambda m: m.set_lora("path", "name"), lambda m: m.clear_lora()):
            with pytest.raises(RuntimeError) as expected:
                call(theirs)
            with pytest.raises(RuntimeError) as got:
                call(ours)
            assert str(got.value) == str(expected.value)
        before = ours.next_token_logprobs_sync([464, 3139])
        assert ours.reset_async_queries() is None
        assert ours.next_token_logprobs_sync([464, 3139]).equal(before)
    finally:
        ours.cleanup()

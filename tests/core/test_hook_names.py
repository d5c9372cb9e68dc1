"""The backend kit's hooks are public; their old underscored names still work (issue 40)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from genlm_backend_kit import EngineLM, PrefixCachedLM
from genlm_backend_kit._hook_names import ENGINE, PREFIX_CACHED

ROOT = Path(__file__).resolve().parents[2]


def test_no_abstract_method_has_an_underscored_name() -> None:
    private = []
    for path in [*ROOT.glob("genlm_core/lm/*.py"), *ROOT.glob("genlm_core/backend_kit/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                abstract = any(
                    (isinstance(d, ast.Name) and d.id == "abstractmethod")
                    or (isinstance(d, ast.Attribute) and d.attr == "abstractmethod")
                    for d in node.decorator_list
                )
                if abstract and node.name.startswith("_"):
                    private.append(f"{path.relative_to(ROOT)}:{node.name}")
    assert not private, f"hooks a backend implements are public: {private}"


@pytest.mark.parametrize(("base", "renames"), [(PrefixCachedLM, PREFIX_CACHED), (EngineLM, ENGINE)])
def test_a_subclass_written_with_the_old_names_still_works(
    base: type, renames: dict[str, str]
) -> None:
    def hook(self: Any, *args: Any, **kwargs: Any) -> str:
        return "old"

    namespace: dict[str, Any] = dict.fromkeys(renames, hook)
    if base is EngineLM:  # its public abstract methods, which kept their names
        namespace |= {
            "start_engine": classmethod(lambda cls, name, opts: None),
            "stop_engine": staticmethod(lambda engine: None),
        }
    with pytest.warns(DeprecationWarning) as caught:
        old_style = type("OldStyle", (base,), namespace)
    messages = " ".join(str(w.message) for w in caught)
    for old, new in renames.items():
        assert getattr(old_style, new) is hook
        assert f"OldStyle.{old} is the old name of the hook {new}" in messages
    assert not getattr(old_style, "__abstractmethods__", frozenset())

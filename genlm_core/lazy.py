"""Lazy package exports (PEP 562): importing a package does not import its heavy parts.

For the core's packages and the plugins': the one table of exports is the imports under
``if TYPE_CHECKING:``, which type checkers and the API pages read too.
"""

from __future__ import annotations

import ast
import functools
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any


def lazy_exports(
    namespace: dict[str, Any], resolve: Callable[[str], Any] | None = None
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``(__getattr__, __dir__)``; ``namespace`` is its ``globals()``.

    The exports are the names the package imports under ``if TYPE_CHECKING:``, the
    one table: type checkers read it, and its source is parsed on the first lookup.
    ``resolve(name)``, if given, finds the values instead (raising ``AttributeError``).
    Resolved names are cached in ``namespace``.
    """
    package = namespace["__name__"]

    @functools.cache
    def exports() -> dict[str, str]:
        tree = ast.parse(Path(namespace["__file__"]).read_text(encoding="utf-8"))
        block = next(
            node
            for node in tree.body
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        )
        return {
            alias.asname or alias.name: str(node.module)
            for node in block.body
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
        }

    def find(name: str) -> Any:
        module = exports().get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    def __getattr__(name: str) -> Any:  # noqa: N807 - the PEP 562 hook
        value = (resolve or find)(name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:  # noqa: N807
        return list(namespace["__all__"])

    return __getattr__, __dir__

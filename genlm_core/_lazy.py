"""Lazy package exports (PEP 562), so importing a package does not import its heavy parts."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(
    package: str, exports: dict[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``(__getattr__, __dir__)`` from ``exports``, ``{name: its module}``.

    ``package`` is the package's ``__name__``; resolved names are cached in
    ``namespace``, its ``globals()``.
    """

    def __getattr__(name: str) -> Any:  # noqa: N807 - the PEP 562 hook
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:  # noqa: N807
        return list(namespace.get("__all__", sorted(exports)))

    return __getattr__, __dir__

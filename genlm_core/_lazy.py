"""Lazy package exports (PEP 562), so importing a package does not import its heavy parts."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(
    package: str, exports: dict[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Build a package's ``__getattr__`` and ``__dir__`` from ``{name: module}``.

    Args:
        package: The package's ``__name__`` (for error messages).
        exports: Public name -> module that defines it.
        namespace: The package's ``globals()``; resolved names are cached there.

    Returns:
        ``(__getattr__, __dir__)`` to assign at module level.
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

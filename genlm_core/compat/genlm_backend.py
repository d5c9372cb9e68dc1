"""genlm-backend's ``genlm.backend.llm`` names.

A model class is imported from its plugin on first use; where that fails it is a
placeholder whose construction raises the install command (docs/migrating.md).
"""

from __future__ import annotations

import importlib
from typing import Any, NoReturn

__all__ = ["llm_name", "placeholder"]

#: ``genlm.backend.llm``'s names that are the core's; the rest are the plugins' classes.
_CORE = {
    "AsyncLM": "genlm_core.lm",
    "MockAsyncLM": "genlm_core.testing.mock",
    "load_model_by_name": "genlm_core.loading",
}


def llm_name(name: str, module: str = "genlm_core.llm") -> Any:
    """The value of ``genlm.backend.llm``'s ``name`` (a placeholder's ``__module__`` is ``module``).

    Raises:
        AttributeError: ``name`` is not one of ``genlm_core.llm.__all__``.
    """
    if name in _CORE:
        return getattr(importlib.import_module(_CORE[name]), name)
    from genlm_core.plugins.official import OFFICIAL_BACKENDS

    for backend in OFFICIAL_BACKENDS:
        if backend.model_class == name:
            try:
                return getattr(importlib.import_module(f"{backend.package}.lm"), name)
            except ImportError as exc:
                return placeholder(name, backend.name, exc, module)
    raise AttributeError(f"module {module!r} has no attribute {name!r}")


def placeholder(
    name: str, backend: str, cause: ImportError, module: str = "genlm_core.llm"
) -> type:
    """A stand-in for model class ``name`` (``"AsyncMlxLM"``) of ``backend`` (``"mlx"``).

    Its construction and ``from_name`` raise [`PluginLoadError`][genlm_core.errors.PluginLoadError]
    naming ``cause`` (why the plugin did not import) and the install command.
    ``module`` is its ``__module__``, the path it was imported from.
    """
    from genlm_core.plugins.official import install_hint

    package = f"genlm_{backend}"
    missing = getattr(cause, "name", None)
    if isinstance(cause, ModuleNotFoundError) and missing and missing.split(".")[0] == package:
        why = f"genlm-{backend} is not installed"
    else:
        why = f"genlm-{backend} cannot be imported here ({type(cause).__name__}: {cause})"
    message = f"{name} is genlm-{backend}'s model class, and {why}: {install_hint(backend)}"

    def fail(*args: Any, **kwargs: Any) -> NoReturn:  # __init__ and from_name
        from genlm_core.errors import PluginLoadError

        raise PluginLoadError(message) from cause

    return type(
        name,
        (),
        {
            "__doc__": f"Placeholder: {message}",
            "__module__": module,
            "__init__": fail,
            "from_name": classmethod(fail),
            "unavailable_reason": message,
        },
    )

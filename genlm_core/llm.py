"""genlm-backend's ``genlm.backend.llm`` names, so migrating stays an import rename.

``from genlm.backend.llm import AsyncTransformer, MockAsyncLM`` becomes
``from genlm_core.llm import AsyncTransformer, MockAsyncLM``. The model classes live in
the backend plugins (genlm-hf, genlm-vllm, genlm-mlx, genlm-sgl). Asking for one
imports its plugin; where that fails (the plugin or its engine is not installed), the
name is a placeholder class, as genlm-backend 0.3.1 defines for absent engines: the
import works (llamppl imports ``AsyncMlxLM`` at module level on every machine),
``isinstance`` is False for every model, and constructing it or calling ``from_name``
raises :class:`~genlm_core.errors.PluginLoadError` (an ``ImportError``) with the
plugin's install command for this machine. Nothing is imported until a name is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, NoReturn

__all__ = [
    "AsyncLM",
    "AsyncMlxLM",
    "AsyncSGLTransformer",
    "AsyncTransformer",
    "AsyncVirtualLM",
    "MockAsyncLM",
    "load_model_by_name",
]

_CORE = {
    "AsyncLM": "genlm_core.lm",
    "MockAsyncLM": "genlm_core.testing.mock",
    "load_model_by_name": "genlm_core.loading",
}
#: Model class -> (backend, module of its plugin).
_PLUGIN_CLASSES = {
    "AsyncTransformer": ("hf", "genlm_hf.lm"),
    "AsyncVirtualLM": ("vllm", "genlm_vllm.lm"),
    "AsyncMlxLM": ("mlx", "genlm_mlx.lm"),
    "AsyncSGLTransformer": ("sgl", "genlm_sgl.lm"),
}


def __getattr__(name: str) -> Any:  # noqa: N807 - the PEP 562 hook
    if name in _CORE:
        value = getattr(importlib.import_module(_CORE[name]), name)
    elif name in _PLUGIN_CLASSES:
        value = _plugin_class(name, *_PLUGIN_CLASSES[name])
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:  # noqa: N807
    return list(__all__)


def _plugin_class(name: str, backend: str, module: str) -> type:
    """The plugin's model class, or a placeholder saying why it cannot be used here."""
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as exc:
        return placeholder(name, backend, exc)


def placeholder(name: str, backend: str, cause: ImportError) -> type:
    """A stand-in for model class ``name`` of backend ``backend``, which failed to import.

    Args:
        name: The model class's name (``"AsyncMlxLM"``).
        backend: Its official backend (``"mlx"``).
        cause: Why the plugin's module did not import.

    Returns:
        A class whose construction and ``from_name`` raise
        :class:`~genlm_core.errors.PluginLoadError` naming ``cause`` and the install
        command.
    """
    from genlm_core.plugins.official import install_hint

    package = f"genlm_{backend}"
    missing = getattr(cause, "name", None)
    if isinstance(cause, ModuleNotFoundError) and missing and missing.split(".")[0] == package:
        why = f"genlm-{backend} is not installed"
    else:
        why = f"genlm-{backend} cannot be imported here ({type(cause).__name__}: {cause})"
    message = f"{name} is genlm-{backend}'s model class, and {why}: {install_hint(backend)}"

    def fail(*args: Any, **kwargs: Any) -> NoReturn:
        from genlm_core.errors import PluginLoadError

        raise PluginLoadError(message) from cause

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        fail()

    return type(
        name,
        (),
        {
            "__doc__": f"Placeholder: {message}",
            "__module__": __name__,
            "__init__": __init__,
            "from_name": classmethod(fail),
            "unavailable_reason": message,
        },
    )


if TYPE_CHECKING:  # pragma: no cover
    from genlm_core.lm import AsyncLM
    from genlm_core.loading import load_model_by_name
    from genlm_core.testing.mock import MockAsyncLM
    from genlm_hf.lm import AsyncTransformer
    from genlm_mlx.lm import AsyncMlxLM
    from genlm_sgl.lm import AsyncSGLTransformer
    from genlm_vllm.lm import AsyncVirtualLM

"""genlm-backend's ``genlm.backend.llm`` names, so migrating stays an import rename.

``from genlm.backend.llm import AsyncTransformer, MockAsyncLM`` becomes
``from genlm_core.llm import AsyncTransformer, MockAsyncLM``. The model classes live in
the backend plugins (genlm-hf, genlm-vllm, genlm-mlx, genlm-sgl): asking for one
imports its plugin, or raises an ``ImportError`` that gives the install command.
Nothing is imported until a name is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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


def _plugin_class(name: str, backend: str, module: str) -> Any:
    package = module.partition(".")[0]
    try:
        return getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as exc:
        if exc.name is None or package != exc.name.partition(".")[0]:
            raise  # the plugin is there; something it imports is not
        from genlm_core.plugins.official import install_command

        raise ImportError(
            f"{name} is genlm-{backend}'s model class, and genlm-{backend} is not "
            f"installed: {install_command(backend)}"
        ) from exc


if TYPE_CHECKING:  # pragma: no cover
    from genlm_core.lm import AsyncLM
    from genlm_core.loading import load_model_by_name
    from genlm_core.testing.mock import MockAsyncLM
    from genlm_hf.lm import AsyncTransformer
    from genlm_mlx.lm import AsyncMlxLM
    from genlm_sgl.lm import AsyncSGLTransformer
    from genlm_vllm.lm import AsyncVirtualLM

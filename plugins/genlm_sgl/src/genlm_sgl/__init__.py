"""genlm-sgl: the SGLang backend for genlm-core.

Installing this distribution registers the ``sgl`` backend through the
``genlm.backends`` entry point (see :mod:`genlm_sgl._plugin`); load it with
``genlm_core.load_model_by_name(name, backend="sgl")``, or use
:class:`AsyncSGLTransformer` (in-process) and :class:`AsyncSGLServerLM` (an SGLang
server over HTTP) directly. Both are imported on first use, so importing this package
never imports sglang.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["AsyncSGLServerLM", "AsyncSGLTransformer", "__version__"]

_LAZY = {"AsyncSGLTransformer": "genlm_sgl.lm", "AsyncSGLServerLM": "genlm_sgl.server"}


if TYPE_CHECKING:  # what static tools (type checkers, the docs' API pages) see
    from genlm_sgl.lm import AsyncSGLTransformer
    from genlm_sgl.server import AsyncSGLServerLM


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'genlm_sgl' has no attribute {name!r}")

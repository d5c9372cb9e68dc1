"""genlm-sgl: the SGLang backend for genlm-core.

Installing this distribution registers the ``sgl`` backend through the
``genlm.backends`` entry point (see `genlm_sgl._plugin`); load it with
``genlm_core.load_model_by_name(name, backend="sgl")``, or use
[`AsyncSGLTransformer`][] (in-process) and [`AsyncSGLServerLM`][] (an SGLang
server over HTTP) directly. Both are imported on first use, so importing this package
never imports sglang.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from genlm_core.lazy import lazy_exports

__version__ = "0.1.0"

__all__ = ["AsyncSGLServerLM", "AsyncSGLTransformer", "__version__"]

if TYPE_CHECKING:  # the exports, loaded on first use: importing the package imports no sglang
    from genlm_sgl.lm import AsyncSGLTransformer
    from genlm_sgl.server import AsyncSGLServerLM

__getattr__, __dir__ = lazy_exports(globals())

"""genlm-mlx: the MLX backend for genlm-core.

Installing this distribution registers the ``mlx`` backend through the
``genlm.backends`` entry point (see `genlm_mlx._plugin`); load it with
``genlm_core.load_model_by_name(name, backend="mlx")``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from genlm_core.lazy import lazy_exports

__version__ = "0.1.0"

__all__ = ["AsyncMlxLM", "__version__"]

if TYPE_CHECKING:  # the exports, loaded on first use: importing the package imports no mlx
    from genlm_mlx.lm import AsyncMlxLM

__getattr__, __dir__ = lazy_exports(globals())

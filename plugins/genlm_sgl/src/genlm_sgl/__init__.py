"""genlm-sgl: the SGLang backend for genlm-core.

Installing this distribution registers the ``sgl`` backend through the
``genlm.backends`` entry point (see :mod:`genlm_sgl._plugin`); load it with
``genlm_core.load_model_by_name(name, backend="sgl")``.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]

"""genlm-hf: the Hugging Face transformers backend for genlm-core.

Installing this distribution registers the ``hf`` backend through the
``genlm.backends`` entry point (see :mod:`genlm_hf._plugin`); load it with
``genlm_core.load_model_by_name(name, backend="hf")``.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]

"""genlm-vllm: the vLLM backend for genlm-core.

Installing this distribution registers the ``vllm`` backend through the
``genlm.backends`` entry point (see :mod:`genlm_vllm._plugin`); load it with
``genlm_core.load_model_by_name(name, backend="vllm")``.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]

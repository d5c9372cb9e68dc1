"""genlm-vllm: the vLLM backend for genlm-core.

Installing this distribution registers the ``vllm`` backend through the
``genlm.backends`` entry point (see :mod:`genlm_vllm._plugin`); load it with
``genlm_core.load_model_by_name(name, backend="vllm")``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["AsyncVirtualLM", "__version__"]


if TYPE_CHECKING:  # what static tools (type checkers, the docs' API pages) see
    from genlm_vllm.lm import AsyncVirtualLM


def __getattr__(name: str) -> Any:
    # Lazy: importing the package (as plugin discovery does) must not import vllm.
    if name == "AsyncVirtualLM":
        from genlm_vllm.lm import AsyncVirtualLM

        return AsyncVirtualLM
    raise AttributeError(f"module 'genlm_vllm' has no attribute {name!r}")

"""genlm-hf: the Hugging Face transformers backend for genlm-core.

Installing this distribution registers the ``hf`` backend through the
``genlm.backends`` entry point (see `genlm_hf._plugin`); load it with
``genlm_core.load_model_by_name(name, backend="hf")`` or use
[`AsyncTransformer`][] directly. Names load lazily so that the entry-point
module never imports torch or transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from genlm_core.lazy import lazy_exports

__version__ = "0.1.0"

__all__ = [
    "AsyncTransformer",
    "KVCacheStats",
    "MissingDependencyError",
    "ModelLoadError",
    "PrefixKVCache",
    "__version__",
    "leave_cores_to_worker",
]

if TYPE_CHECKING:  # what static tools (type checkers, the docs' API pages) see
    from genlm_hf._threads import leave_cores_to_worker
    from genlm_hf.errors import MissingDependencyError, ModelLoadError
    from genlm_hf.kvcache import KVCacheStats, PrefixKVCache
    from genlm_hf.lm import AsyncTransformer

__getattr__, __dir__ = lazy_exports(globals())

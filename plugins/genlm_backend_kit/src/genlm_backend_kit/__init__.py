"""genlm-backend-kit: what genlm-core's official backends share, for backend authors.

[`PrefixCachedLM`][] (in-process models with a prefix key/value cache: genlm-hf,
genlm-mlx), [`EngineLM`][] (engines with their own scheduler: genlm-vllm,
genlm-sgl), [`PrefixTree`][], forward planning and engine version checks. A
backend needs none of it: genlm-core's [`BatchedAsyncLM`][genlm_core.lm.BatchedAsyncLM] and
[`Backend`][genlm_core.lm.Backend] are the contract; this kit is shared implementation,
so it ships apart from the core.
"""

from __future__ import annotations

from genlm_backend_kit._engine_lm import EngineLM
from genlm_backend_kit._planning import PlannedInput, plan_groups, shared_prefixes
from genlm_backend_kit._prefix_cached import (
    DEFAULT_KV_CACHE_BYTES,
    DEFAULT_MAX_BATCH_KV_BYTES,
    MIN_SHARED,
    PrefixCachedLM,
    max_positions_of,
)
from genlm_backend_kit._prefix_tree import PrefixCacheStats, PrefixNode, PrefixTree
from genlm_backend_kit._versions import require_pieces, require_version, version_supported

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_KV_CACHE_BYTES",
    "DEFAULT_MAX_BATCH_KV_BYTES",
    "MIN_SHARED",
    "EngineLM",
    "PlannedInput",
    "PrefixCachedLM",
    "PrefixCacheStats",
    "PrefixNode",
    "PrefixTree",
    "max_positions_of",
    "plan_groups",
    "require_pieces",
    "require_version",
    "shared_prefixes",
    "version_supported",
]

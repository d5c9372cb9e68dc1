"""For backend authors: what the official backends share, and argument checks.

:class:`PrefixCachedLM` (in-process models with a prefix key/value cache),
:class:`EngineLM` (engines with their own scheduler), :class:`PrefixTree`, forward
planning, engine version checks, and the core's checks of counts and ids.
"""

from __future__ import annotations

from genlm_core._validation import is_int_at_least, is_integer
from genlm_core.backend_kit._engine_lm import EngineLM
from genlm_core.backend_kit._planning import PlannedInput, plan_groups, shared_prefixes
from genlm_core.backend_kit._prefix_cached import (
    DEFAULT_KV_CACHE_BYTES,
    DEFAULT_MAX_BATCH_KV_BYTES,
    MIN_SHARED,
    PrefixCachedLM,
    max_positions_of,
)
from genlm_core.backend_kit._prefix_tree import PrefixCacheStats, PrefixNode, PrefixTree
from genlm_core.backend_kit._versions import require_pieces, require_version, version_supported

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
    "is_int_at_least",
    "is_integer",
    "max_positions_of",
    "plan_groups",
    "require_pieces",
    "require_version",
    "shared_prefixes",
    "version_supported",
]

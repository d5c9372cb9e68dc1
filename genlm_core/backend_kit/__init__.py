"""For backend authors: what genlm-hf and genlm-mlx share, and argument checks.

* :class:`PrefixCachedLM`: the base of backends that run a model in-process with a
  prefix key/value cache; a subclass implements its forward, its key/value store and
  its adapter activation.
* :class:`EngineLM`: the base of backends that hand batches to an engine with its own
  scheduler (genlm-vllm, genlm-sgl).
* :class:`PrefixTree`: per-adapter radix trees of token segments with LRU eviction of
  leaves, the core of a prefix key/value cache.
* :func:`plan_groups` and :func:`shared_prefixes`: which rows of a batch share a padded
  forward, and which shared prefixes to compute once first.
* :func:`require_version`, :func:`require_pieces`: refuse an engine version that was
  not tested, or one whose internals a backend uses have moved.
* :func:`is_int_at_least`, :func:`is_integer`: the core's checks of counts and ids, so
  that a backend refuses bad options the way the core does.
"""

from __future__ import annotations

from genlm_core._validation import is_int_at_least, is_integer
from genlm_core.backend_kit._engine_lm import EngineLM
from genlm_core.backend_kit._planning import PlannedRow, plan_groups, shared_prefixes
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
    "PlannedRow",
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

"""For backend authors: what genlm-hf and genlm-mlx share, and argument checks.

* :class:`PrefixTree`: per-adapter radix trees of token segments with LRU eviction of
  leaves, the core of a prefix key/value cache.
* :func:`plan_groups` and :func:`shared_prefixes`: which rows of a batch share a padded
  forward, and which shared prefixes to compute once first.
* :func:`is_int_at_least`, :func:`is_integer`: the core's checks of counts and ids, so
  that a backend refuses bad options the way the core does.
"""

from __future__ import annotations

from genlm_core._validation import is_int_at_least, is_integer
from genlm_core.backend_kit._planning import PlannedRow, plan_groups, shared_prefixes
from genlm_core.backend_kit._prefix_tree import PrefixCacheStats, PrefixNode, PrefixTree

__all__ = [
    "PlannedRow",
    "PrefixCacheStats",
    "PrefixNode",
    "PrefixTree",
    "is_int_at_least",
    "is_integer",
    "plan_groups",
    "shared_prefixes",
]

"""PrefixKVCache: MLX key/value arrays of token prefixes, in a radix tree, LRU-evicted.

Same shape as genlm-hf's cache, for the same reason: probabilistic programs extend
the same prefixes over and over (every particle of a sampler shares the prompt, then
adds one token per step). Each node of the tree stands for the tokens one forward
added (its edge label) and owns the keys and values of exactly those positions, all
layers stacked in one array of shape ``(2 * layers, kv_heads, tokens, head_dim)``.
A prefix is stored once however many continuations it has, and a request's past is
the concatenation of the arrays along its path.

Why arrays per node rather than genlm-hf's slot pool: MLX arrays are immutable
values; writing into a big preallocated pool would copy it (or depend on buffer
donation), while a small array per segment is allocated once and freed when evicted.
Splitting a node copies its two halves, so every byte counted is a byte held.

The tree itself (per-adapter roots, splits, LRU over leaves) is
[`genlm_backend_kit.PrefixTree`][], shared with genlm-hf; a node's payload
here is its array.

One tree per LoRA adapter (``None`` = the base model), one budget and LRU order
across them. Not thread-safe: the model calls it under its lock.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import mlx.core as mx

from genlm_backend_kit import PrefixCacheStats, PrefixTree
from genlm_core.checks import is_int_at_least

__all__ = ["KVCacheStats", "PrefixKVCache"]


KVCacheStats = PrefixCacheStats
"""A snapshot of a [`PrefixKVCache`][] (the core's ``PrefixCacheStats``)."""


class PrefixKVCache:
    """Per-adapter radix trees of key/value segments under one byte budget.

    Args:
        max_bytes: Most bytes of key/value arrays held (0 disables the cache).

    Raises:
        ValueError: ``max_bytes`` is not an integer >= 0.
    """

    def __init__(self, max_bytes: int) -> None:
        if not is_int_at_least(max_bytes, 0):
            raise ValueError(f"max_bytes must be an integer >= 0, got {max_bytes!r}")
        self._max_bytes = max_bytes
        self._tree: PrefixTree[mx.array] = PrefixTree(split=_split_array, release=self._forget)
        self._bytes = 0

    @property
    def max_bytes(self) -> int:
        """The budget, in bytes."""
        return self._max_bytes

    # -- reading -------------------------------------------------------------------

    def match(
        self, adapter: Hashable, token_ids: Sequence[int], limit: int, *, record: bool = True
    ) -> tuple[list[mx.array], int]:
        """Find the longest cached prefix of ``token_ids[:limit]``.

        Args:
            adapter: Which tree (LoRA adapter name, None for the base model).
            token_ids: The request's tokens.
            limit: Most positions to reuse (callers pass ``len(token_ids) - 1``: the last
                position must be computed to get its logits).
            record: Count this lookup in the hit/miss statistics.

        Returns:
            The key/value arrays of positions ``0, 1, ...`` in order (to concatenate
            along axis 2), and the number of positions they cover.
        """
        found, pos = self._tree.match(adapter, token_ids, limit)
        parts = [kv if used == held else kv[:, :, :used] for kv, used, held in found]
        if record:
            self.count(pos)
        return parts, pos

    def count(self, reused: int) -> None:
        """Count one lookup that reused ``reused`` positions (0: a miss)."""
        self._tree.count(reused)

    # -- writing -------------------------------------------------------------------

    def insert(self, adapter: Hashable, token_ids: Sequence[int], start: int, kv: mx.array) -> None:
        """Store the keys/values of positions ``start..len(token_ids)-1`` of a request.

        Only what the tree lacks is stored. If the tree no longer holds positions
        ``0..start-1`` (evicted since the lookup), or the budget cannot make room
        without evicting this very prefix, nothing is stored.

        Args:
            adapter: Which tree.
            token_ids: The request's tokens.
            start: First position covered by ``kv``.
            kv: Evaluated array of shape ``(2 * layers, heads, len(token_ids) - start, dim)``.
        """
        if self._max_bytes == 0:
            return
        end = len(token_ids)
        node, path, pos = self._tree.locate(adapter, token_ids)
        if not start <= pos < end:
            return
        if pos > start:
            kv = mx.contiguous(kv[:, :, pos - start :])
            mx.eval(kv)
        if not self._make_room(kv.nbytes, protect=path):
            return
        self._tree.attach(node, tuple(token_ids[pos:]), kv, path)
        self._bytes += kv.nbytes

    def _make_room(self, nbytes: int, protect: Sequence[object]) -> bool:
        """Evict LRU leaves not on ``protect`` until ``nbytes`` more fit the budget."""
        if nbytes > self._max_bytes:
            return False
        keep = set(protect)
        while self._bytes + nbytes > self._max_bytes:
            if not self._tree.evict_one(keep):
                return False  # only this prefix's own ancestors are left
        return True

    # -- dropping ------------------------------------------------------------------

    def _forget(self, kv: mx.array) -> None:
        self._bytes -= kv.nbytes

    def drop_adapter(self, adapter: Hashable) -> None:
        """Forget every prefix cached for ``adapter``."""
        self._tree.drop_adapter(adapter)

    def clear(self) -> None:
        """Forget everything (statistics are kept)."""
        self._tree.clear()
        self._bytes = 0

    # -- introspection -------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        """Bytes of key/value arrays held."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._tree)

    @property
    def stats(self) -> KVCacheStats:
        """A snapshot of sizes and counters."""
        return self._tree.stats(self._bytes, self._max_bytes)

    def __repr__(self) -> str:
        s = self.stats
        return (
            f"<PrefixKVCache {s.bytes / 2**20:.1f}/{s.max_bytes / 2**20:.1f} MiB, "
            f"{s.entries} segments, {s.tokens} tokens, hits={s.hits} misses={s.misses}>"
        )


def _split_array(kv: mx.array, m: int) -> tuple[mx.array, mx.array]:
    """A node's array split after ``m`` positions, as two arrays of their own."""
    head = mx.contiguous(kv[:, :, :m])
    tail = mx.contiguous(kv[:, :, m:])
    mx.eval(head, tail)
    return head, tail

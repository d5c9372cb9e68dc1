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

Why LRU over leaves: a node's keys and values are only meaningful after its
ancestors', so only leaves can go. Every use touches the path from the deepest node
up to the root, so parents are always more recent than their children and the least
recently used node is always a leaf. Results never change after eviction: an
evicted prefix is simply recomputed.

One tree per LoRA adapter (``None`` = the base model), one budget and LRU order
across them. Not thread-safe: the model calls it under its lock.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Hashable, Sequence

import mlx.core as mx

__all__ = ["KVCacheStats", "PrefixKVCache"]


@dataclasses.dataclass(frozen=True)
class KVCacheStats:
    """A snapshot of a :class:`PrefixKVCache`.

    Attributes:
        bytes: Bytes of key/value arrays held.
        max_bytes: The budget.
        entries: Nodes (cached segments) held.
        tokens: Token positions held, summed over all nodes.
        hits: Lookups that found at least one cached token.
        misses: Lookups that found none.
        hit_tokens: Token positions reused from the cache (not recomputed).
        evictions: Nodes evicted to make room.
    """

    bytes: int
    max_bytes: int
    entries: int
    tokens: int
    hits: int
    misses: int
    hit_tokens: int
    evictions: int


class _Node:
    """A segment of a prefix: its tokens, their keys/values, tree links."""

    __slots__ = ("tokens", "kv", "parent", "children")

    def __init__(self, tokens: tuple[int, ...], kv: mx.array | None, parent: _Node | None) -> None:
        self.tokens = tokens
        self.kv = kv
        self.parent = parent
        self.children: dict[int, _Node] = {}


class PrefixKVCache:
    """Per-adapter radix trees of key/value segments under one byte budget.

    Args:
        max_bytes: Most bytes of key/value arrays held (0 disables the cache).

    Raises:
        ValueError: ``max_bytes`` is not an integer >= 0.
    """

    def __init__(self, max_bytes: int) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"max_bytes must be an integer >= 0, got {max_bytes!r}")
        self._max_bytes = max_bytes
        self._roots: dict[Hashable, _Node] = {}
        self._lru: OrderedDict[_Node, None] = OrderedDict()
        self._bytes = 0
        self._tokens = 0
        self._hits = 0
        self._misses = 0
        self._hit_tokens = 0
        self._evictions = 0

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
        node = self._roots.get(adapter)
        path: list[_Node] = []
        parts: list[mx.array] = []
        pos = 0
        while node is not None and pos < limit:
            child = node.children.get(token_ids[pos])
            if child is None:
                break
            seg = child.tokens
            n = min(len(seg), limit - pos)
            m = 1  # the first token matched: it is the dict key
            while m < n and seg[m] == token_ids[pos + m]:
                m += 1
            assert child.kv is not None
            parts.append(child.kv if m == len(seg) else child.kv[:, :, :m])
            path.append(child)
            pos += m
            if m < len(seg):
                break
            node = child
        if path:
            self._touch(path)
        if record:
            self.count(pos)
        return parts, pos

    def count(self, reused: int) -> None:
        """Count one lookup that reused ``reused`` positions (0: a miss)."""
        if reused:
            self._hits += 1
            self._hit_tokens += reused
        else:
            self._misses += 1

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
        node = self._roots.get(adapter)
        if node is None:
            node = self._roots[adapter] = _Node((), None, None)
        path: list[_Node] = []
        pos = 0
        while pos < end:
            child = node.children.get(token_ids[pos])
            if child is None:
                break
            seg = child.tokens
            n = min(len(seg), end - pos)
            m = 1
            while m < n and seg[m] == token_ids[pos + m]:
                m += 1
            if m < len(seg):
                if pos + m == end:  # the request ends inside this segment: all present
                    path.append(child)
                    pos = end
                    break
                child = self._split(child, m)
            path.append(child)
            pos += len(child.tokens)
            node = child
        self._touch(path)
        if not start <= pos < end:
            return
        if pos > start:
            kv = mx.contiguous(kv[:, :, pos - start :])
            mx.eval(kv)
        if not self._make_room(kv.nbytes, protect=path):
            return
        new = _Node(tuple(token_ids[pos:]), kv, node)
        node.children[new.tokens[0]] = new
        self._bytes += kv.nbytes
        self._tokens += end - pos
        self._lru[new] = None  # most recent, then its ancestors:
        self._touch(path)

    def _split(self, node: _Node, m: int) -> _Node:
        """Split ``node`` after ``m`` tokens; return the new upper node (parent of ``node``)."""
        assert node.parent is not None and node.kv is not None
        head = mx.contiguous(node.kv[:, :, :m])
        tail = mx.contiguous(node.kv[:, :, m:])
        mx.eval(head, tail)
        upper = _Node(node.tokens[:m], head, node.parent)
        node.parent.children[upper.tokens[0]] = upper
        node.tokens = node.tokens[m:]
        node.kv = tail
        node.parent = upper
        upper.children[node.tokens[0]] = node
        self._lru[upper] = None  # touched (made more recent than ``node``) by the caller
        return upper

    def _touch(self, path: list[_Node]) -> None:
        """Mark a root-to-leaf path as just used, deepest first (parents stay newer)."""
        move = self._lru.move_to_end
        for node in reversed(path):
            move(node)

    def _make_room(self, nbytes: int, protect: list[_Node]) -> bool:
        """Evict LRU leaves not on ``protect`` until ``nbytes`` more fit the budget."""
        if nbytes > self._max_bytes:
            return False
        keep = set(protect)
        while self._bytes + nbytes > self._max_bytes:
            victim = next(iter(self._lru), None)
            if victim is None or victim in keep:
                return False  # only this prefix's own ancestors are left
            self._evictions += self._drop_subtree(victim)
        return True

    # -- eviction ------------------------------------------------------------------

    def _drop_subtree(self, node: _Node) -> int:
        """Detach ``node`` and everything below it; return the number of nodes dropped."""
        if node.parent is not None:
            node.parent.children.pop(node.tokens[0], None)
        dropped = 0
        stack = [node]
        while stack:
            n = stack.pop()
            stack.extend(n.children.values())
            n.children = {}
            if n in self._lru:
                del self._lru[n]
                dropped += 1
            if n.kv is not None:
                self._bytes -= n.kv.nbytes
                self._tokens -= len(n.tokens)
                n.kv = None
        return dropped

    def drop_adapter(self, adapter: Hashable) -> None:
        """Forget every prefix cached for ``adapter``."""
        root = self._roots.pop(adapter, None)
        if root is not None:
            for child in list(root.children.values()):
                self._drop_subtree(child)

    def clear(self) -> None:
        """Forget everything (statistics are kept)."""
        self._roots.clear()
        self._lru.clear()
        self._bytes = 0
        self._tokens = 0

    # -- introspection -------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        """Bytes of key/value arrays held."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._lru)

    @property
    def stats(self) -> KVCacheStats:
        """A snapshot of sizes and counters."""
        return KVCacheStats(
            bytes=self._bytes,
            max_bytes=self._max_bytes,
            entries=len(self._lru),
            tokens=self._tokens,
            hits=self._hits,
            misses=self._misses,
            hit_tokens=self._hit_tokens,
            evictions=self._evictions,
        )

    def __repr__(self) -> str:
        s = self.stats
        return (
            f"<PrefixKVCache {s.bytes / 2**20:.1f}/{s.max_bytes / 2**20:.1f} MiB, "
            f"{s.entries} segments, {s.tokens} tokens, hits={s.hits} misses={s.misses}>"
        )

"""PrefixTree: per-adapter radix trees of token segments, least recently used leaves first.

The framework-neutral half of the backends' prefix key/value caches; what a node holds
(its payload) stays with the backend. Not thread-safe: backends call it under their
model lock. Why segments and leaf-first LRU: docs/architecture.md ("Prefix trees").
"""

from __future__ import annotations

import dataclasses
import types
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Generic, TypeVar

P = TypeVar("P")


@dataclasses.dataclass(frozen=True)
class PrefixCacheStats:
    """A snapshot of a backend's prefix key/value cache.

    Attributes:
        bytes: Bytes of keys and values held.
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


S = TypeVar("S", bound=PrefixCacheStats)


#: The children of every leaf, shared: a leaf carries no dict (one object fewer for the
#: garbage collector to scan); `_add_child` gives a node its own.
_NO_CHILDREN: Mapping[int, Any] = types.MappingProxyType({})


class PrefixNode(Generic[P]):
    """A segment of a prefix: its tokens, what the backend stores for them, tree links."""

    __slots__ = ("tokens", "payload", "parent", "children")

    def __init__(self, tokens: tuple[int, ...], payload: P | None, parent: PrefixNode[P] | None):
        self.tokens = tokens
        self.payload = payload
        self.parent = parent
        self.children: Mapping[int, PrefixNode[P]] = _NO_CHILDREN


def _common_length(seg: tuple[int, ...], token_ids: Sequence[int], pos: int, stop: int) -> int:
    """How many leading tokens of ``seg`` equal ``token_ids[pos:stop]`` (the first does)."""
    n = min(len(seg), stop - pos)
    if tuple(token_ids[pos : pos + n]) == seg[:n]:  # the usual case, compared in C
        return n
    m = 1  # the first token matched: it is the dict key
    while seg[m] == token_ids[pos + m]:  # stops before n: they differ somewhere
        m += 1
    return m


def _add_child(parent: PrefixNode[P], child: PrefixNode[P]) -> None:
    if parent.children is _NO_CHILDREN:
        parent.children = {}
    parent.children[child.tokens[0]] = child  # type: ignore[index]


class PrefixTree(Generic[P]):
    """Radix trees of token segments with payloads, one per adapter, one LRU order.

    Args:
        split: ``split(payload, m)`` -> the payloads of a node's first ``m`` tokens and
            of the rest (when a new prompt leaves the node in the middle).
        release: Called with the payload of every node dropped (not by [`clear`][]).
        merge: ``merge(payload, extension)`` -> one payload for both. Given, a segment
            below a *leaf* extends it, so a prefix growing a token per step stays one
            node. Leave it out when joining payloads copies them (MLX arrays).

    Attributes:
        tokens: Token positions held, summed over all nodes.
        hits, misses, hit_tokens: Lookups that reused positions, that reused none, and
            the positions reused (see [`count`][]).
        evictions: Nodes evicted by [`evict_one`][].
    """

    def __init__(
        self,
        split: Callable[[P, int], tuple[P, P]],
        release: Callable[[P], None] | None = None,
        merge: Callable[[P, P], P] | None = None,
    ) -> None:
        self._split_payload = split
        self._release = release
        self._merge = merge
        self._roots: dict[Hashable, PrefixNode[P]] = {}
        self._lru: OrderedDict[PrefixNode[P], None] = OrderedDict()
        self.tokens = 0
        self.hits = 0
        self.misses = 0
        self.hit_tokens = 0
        self.evictions = 0

    def __len__(self) -> int:
        """Nodes held."""
        return len(self._lru)

    def stats(
        self, nbytes: int, max_bytes: int, cls: type[S] = PrefixCacheStats, **extra: Any
    ) -> S:
        """A ``cls`` snapshot: the backend's byte counts, this tree's sizes and counters."""
        return cls(
            bytes=nbytes,
            max_bytes=max_bytes,
            entries=len(self._lru),
            tokens=self.tokens,
            hits=self.hits,
            misses=self.misses,
            hit_tokens=self.hit_tokens,
            evictions=self.evictions,
            **extra,
        )

    def match(
        self, adapter: Hashable, token_ids: Sequence[int], limit: int
    ) -> tuple[list[tuple[P, int, int]], int]:
        """Find the longest stored prefix of ``token_ids[:limit]`` and mark it used.

        Returns ``(segments, length)``: per node on the path ``(payload, positions used,
        positions held)``, and the number of positions matched.
        """
        node = self._roots.get(adapter)
        path: list[PrefixNode[P]] = []
        found: list[tuple[P, int, int]] = []
        pos = 0
        while node is not None and pos < limit:
            child = node.children.get(token_ids[pos])
            if child is None:
                break
            seg = child.tokens
            m = _common_length(seg, token_ids, pos, limit)
            assert child.payload is not None
            found.append((child.payload, m, len(seg)))
            path.append(child)
            pos += m
            if m < len(seg):
                break
            node = child
        if path:
            self._touch(path)
        return found, pos

    def count(self, reused: int) -> None:
        """Count one lookup that reused ``reused`` positions (0: a miss)."""
        if reused:
            self.hits += 1
            self.hit_tokens += reused
        else:
            self.misses += 1

    def locate(
        self, adapter: Hashable, token_ids: Sequence[int]
    ) -> tuple[PrefixNode[P], list[PrefixNode[P]], int]:
        """Walk ``token_ids`` as far as the tree holds them, splitting where they diverge.

        Marks the path used; returns ``(deepest node, path, positions held)`` for [`attach`][].
        """
        end = len(token_ids)
        node = self._roots.get(adapter)
        if node is None:
            node = self._roots[adapter] = PrefixNode((), None, None)
        path: list[PrefixNode[P]] = []
        pos = 0
        while pos < end:
            child = node.children.get(token_ids[pos])
            if child is None:
                break
            seg = child.tokens
            m = _common_length(seg, token_ids, pos, end)
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
        return node, path, pos

    def attach(
        self,
        parent: PrefixNode[P],
        tokens: tuple[int, ...],
        payload: P,
        path: list[PrefixNode[P]],
    ) -> None:
        """Add a leaf below ``parent`` (the end of ``path``, from [`locate`][]).

        With ``merge``, a ``parent`` that is a leaf grows by the segment instead.
        """
        if self._merge is not None and parent.payload is not None and not parent.children:
            parent.tokens += tokens
            parent.payload = self._merge(parent.payload, payload)
            self.tokens += len(tokens)
            self._touch(path)
            return
        new = PrefixNode(tokens, payload, parent)
        _add_child(parent, new)
        self.tokens += len(tokens)
        self._lru[new] = None  # most recent, then its ancestors:
        self._touch(path)

    def evict_one(self, protect: Sequence[PrefixNode[P]]) -> bool:
        """Drop the least recently used leaf unless it is on ``protect``; whether one was."""
        victim = next(iter(self._lru), None)
        if victim is None or victim in protect:
            return False
        self.evictions += self._drop_subtree(victim)
        return True

    def _split(self, node: PrefixNode[P], m: int) -> PrefixNode[P]:
        """Split ``node`` after ``m`` tokens; return the new upper node (parent of ``node``)."""
        assert node.parent is not None and node.payload is not None
        head, tail = self._split_payload(node.payload, m)
        upper = PrefixNode(node.tokens[:m], head, node.parent)
        _add_child(node.parent, upper)  # replaces ``node`` there: same first token
        node.tokens = node.tokens[m:]
        node.payload = tail
        node.parent = upper
        _add_child(upper, node)
        self._lru[upper] = None  # touched (made more recent than ``node``) by the caller
        return upper

    def _touch(self, path: list[PrefixNode[P]]) -> None:
        """Mark a root-to-leaf path as just used, deepest first (parents stay newer)."""
        move = self._lru.move_to_end
        for node in reversed(path):
            move(node)

    def _drop_subtree(self, node: PrefixNode[P]) -> int:
        """Detach ``node`` and everything below it; return the number of nodes dropped."""
        if node.parent is not None and node.parent.children is not _NO_CHILDREN:
            node.parent.children.pop(node.tokens[0], None)  # type: ignore[attr-defined]
        dropped = 0
        stack = [node]
        while stack:
            n = stack.pop()
            stack.extend(n.children.values())
            n.children = _NO_CHILDREN
            if n in self._lru:
                del self._lru[n]
                dropped += 1
            if n.payload is not None:
                if self._release is not None:
                    self._release(n.payload)
                self.tokens -= len(n.tokens)
                n.payload = None
        return dropped

    def drop_adapter(self, adapter: Hashable) -> None:
        """Forget every prefix stored for ``adapter`` (payloads released)."""
        root = self._roots.pop(adapter, None)
        if root is not None:
            for child in list(root.children.values()):
                self._drop_subtree(child)

    def clear(self) -> None:
        """Forget everything, without releasing payloads (counters are kept)."""
        self._roots.clear()
        self._lru.clear()
        self.tokens = 0

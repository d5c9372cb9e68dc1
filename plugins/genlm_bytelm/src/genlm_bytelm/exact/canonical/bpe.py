"""BPE inside one pre-token: which adjacent token pairs the merges leave as they are.

A token string is the BPE of its bytes exactly when every adjacent pair is (docs/bytes-design.md,
*How the filter computes it*); scalar questions go to the tokenizer's own BPE model.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from typing import Any

import numpy as np

__all__ = ["BPEPairs", "merge_ranks"]

_INF = 2**31  # above every merge rank; keys y * 2**32 + rank stay in int64
#: Spines kept (per token and edge) before the cache is emptied.
SPINES_KEPT = 8192  # ~1 KB each at most: a few MB


class BPEPairs:
    """The merges of a tokenizer (a ``TokenizerSpec``) over ``byte_vocab``, for pair tests."""

    def __init__(self, spec: Any, byte_vocab: list[bytes], cache_size: int = 256) -> None:
        self.n = len(byte_vocab)
        self.ignore_merges = spec.ignore_merges
        self.strings = {i: s for s, i in spec.vocab.items()}
        ids = spec.vocab
        self.ranks = merge_ranks(spec.merges, ids)
        # Merges-only BPE (no ignore_merges): what bigram validity is about. Without
        # ignore_merges that is the tokenizer's own model; with it, `_bpe` on the
        # bytes (building a second Rust model would hold the GIL ~0.2 s for Llama-3,
        # freezing the event loop whatever thread builds the filter).
        self._merges_only = None if spec.ignore_merges else spec.backend.model
        self._full = spec.backend.model
        self._byte_vocab = byte_vocab
        self._byte_id: dict[int, int] = {}
        for s, i in ids.items():
            if len(s) == 1 and i < self.n and len(byte_vocab[i]) == 1:
                self._byte_id[byte_vocab[i][0]] = i
        self.left = np.full(self.n, -1, dtype=np.int64)
        self.right = np.full(self.n, -1, dtype=np.int64)
        self.rank = np.full(self.n, -1, dtype=np.int64)
        self.derivable = np.zeros(self.n, dtype=bool)
        self._derive(byte_vocab, ids)
        self._index()
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._spines: dict[tuple[int, bool], list[tuple[int, int]]] = {}
        #: Bytes of vocabulary tokens BPE's merges never produce (kept whole only by
        #: ``ignore_merges``), for the closed-group test.
        self.underivable_bytes = {
            bytes(byte_vocab[i]): i
            for i in self.strings
            if i < self.n and not self.derivable[i] and len(byte_vocab[i]) > 1
        }

    def _derive(self, byte_vocab: list[bytes], ids: dict[str, int]) -> None:
        """Which tokens merges rebuild from their bytes, and the last merge that does."""
        byte_id = self._byte_id
        makers: dict[int, list[tuple[int, int, int]]] = {}
        for (u, v), (rank, result) in self.ranks.items():
            makers.setdefault(result, []).append((u, v, rank))
        ranks = self.ranks
        for s, tid in ids.items():
            if tid >= self.n:
                continue
            data = bytes(byte_vocab[tid])
            if not data or any(b not in byte_id for b in data):
                continue
            if len(data) == 1:
                self.derivable[tid] = byte_id[data[0]] == tid
                continue
            made = makers.get(tid, [])
            if len(made) == 1:
                if self._merged(s, data) == [tid]:
                    self.derivable[tid] = True
                    self.left[tid], self.right[tid], self.rank[tid] = made[0]
                continue
            final, last = _bpe([byte_id[b] for b in data], ranks)
            if final == [tid] and last is not None:
                self.derivable[tid] = True
                self.left[tid], self.right[tid], self.rank[tid] = last

    def _index(self) -> None:
        """Inverted index of left spines and merges grouped by their left symbol."""
        ys, cs, consume = [], [], []
        for c in np.flatnonzero(self.derivable).tolist():
            y, k = c, _INF
            while y >= 0:
                ys.append(y)
                cs.append(c)
                consume.append(k)
                k = int(self.rank[y])
                y = int(self.left[y])
        ys_a, cs_a, consume_a = map(np.asarray, (ys, cs, consume))
        order = np.lexsort((-consume_a, ys_a))
        self._spine_y = ys_a[order]
        self._spine_c = cs_a[order]
        self._spine_key = ys_a[order] * (2 * _INF) + (_INF - consume_a[order])
        self._spine_start = np.searchsorted(self._spine_y, np.arange(self.n + 1))
        lefts = np.fromiter((u for u, _ in self.ranks), dtype=np.int64, count=len(self.ranks))
        rights = np.fromiter((v for _, v in self.ranks), dtype=np.int64, count=len(self.ranks))
        rk = np.fromiter((r for r, _ in self.ranks.values()), dtype=np.int64, count=len(self.ranks))
        order = np.argsort(lefts, kind="stable")
        self._m_left, self._m_right, self._m_rank = lefts[order], rights[order], rk[order]
        self._m_start = np.searchsorted(self._m_left, np.arange(self.n + 1))

    def right_spine(self, a: int) -> list[tuple[int, int]]:
        """``(symbol, rank that consumes it inside a)`` down ``a``'s right edge."""
        return self._spine(a, self.right)

    def _spine(self, t: int, side: np.ndarray) -> list[tuple[int, int]]:
        """``(symbol, rank that consumes it inside t)`` down one edge of ``t`` (kept)."""
        key = (t, side is self.right)
        hit = self._spines.get(key)
        if hit is not None:
            return hit
        out, x, k = [], t, _INF
        while x >= 0:
            out.append((x, k))
            k = int(self.rank[x])
            x = int(side[x])
        if len(self._spines) >= SPINES_KEPT:
            self._spines.clear()
        self._spines[key] = out
        return out

    def pair_invalid(self, a: int, c: int) -> bool:
        """``invalid_after(a)[c]``, without building the vector (a cached one is read).

        A merge across the pair joins a symbol down ``a``'s right edge to one down
        ``c``'s left edge before either is consumed: tens of lookups, where the vector
        is a pass over the vocabulary (~0.3 ms for Gemma 3's 262k tokens).
        """
        hit = self._cache.get(a)
        if hit is not None:
            return bool(hit[c])
        if not (self.derivable[a] and self.derivable[c]):
            return True
        ranks, lefts = self.ranks, self._spine(c, self.left)
        for x, k in self._spine(a, self.right):
            for y, consumed in lefts:
                merge = ranks.get((x, y))
                if merge is not None and merge[0] < k and merge[0] <= consumed:
                    return True
        return False

    def invalid_after(self, a: int) -> np.ndarray:
        """Boolean vector over token ids: ``c`` cannot follow ``a`` inside one pre-token.

        True where merges would join across the pair, and for tokens merges never produce.
        Cached per ``a``: read-only.
        """
        hit = self._cache.get(a)
        if hit is not None:
            self._cache.move_to_end(a)
            return hit
        out = ~self.derivable
        if self.derivable[a]:
            out = out.copy()
            ys, rs = [], []
            for x, k in self.right_spine(a):
                lo, hi = self._m_start[x], self._m_start[x + 1]
                keep = self._m_rank[lo:hi] < k
                ys.append(self._m_right[lo:hi][keep])
                rs.append(self._m_rank[lo:hi][keep])
            y, r = np.concatenate(ys), np.concatenate(rs)
            if y.size:
                start = self._spine_start[y]
                end = np.searchsorted(self._spine_key, y * (2 * _INF) + (_INF - r), side="right")
                counts = np.maximum(end - start, 0)
                total = int(counts.sum())
                if total:
                    offsets = np.repeat(start - np.cumsum(counts) + counts, counts)
                    out[self._spine_c[offsets + np.arange(total)]] = True
        else:
            out = np.ones(self.n, dtype=bool)
        out.flags.writeable = False
        self._cache[a] = out
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return out

    def merges_only(self, ids: list[int]) -> bool:
        """Whether merges alone (no ``ignore_merges``) turn these tokens' bytes into them."""
        if len(ids) == 1:
            return bool(self.derivable[ids[0]])
        text = "".join(self.strings[i] for i in ids)
        data = b"".join(bytes(self._byte_vocab[i]) for i in ids)
        return self._merged(text, data) == list(ids)

    def _merged(self, text: str, data: bytes) -> list[int]:
        """Merges-only BPE of one word (``text``: its vocabulary string; ``data``: bytes)."""
        if self._merges_only is not None:
            return [t.id for t in self._merges_only.tokenize(text)]
        if any(b not in self._byte_id for b in data):
            return []  # a byte no token spells: merges make nothing of it
        return _bpe([self._byte_id[b] for b in data], self.ranks)[0]

    def closed_group(self, ids: list[int]) -> bool:
        """Whether the tokenizer's BPE turns a whole pre-token spelled by ``ids`` into them."""
        text = "".join(self.strings[i] for i in ids)
        return [t.id for t in self._full.tokenize(text)] == list(ids)

    def underivable_after(self, tail: bytes) -> dict[int, bytes]:
        """Underivable tokens whose bytes start with ``tail`` (the rest, by token id)."""
        return {i: b[len(tail) :] for b, i in self.underivable_bytes.items() if b.startswith(tail)}


def merge_ranks(
    merges: list[tuple[str, str]], ids: dict[str, int]
) -> dict[tuple[int, int], tuple[int, int]]:
    """``(left id, right id) -> (rank, merged id)``, the first merge of each pair."""
    ranks: dict[tuple[int, int], tuple[int, int]] = {}
    for rank, (u, v) in enumerate(merges):
        key = (ids[u], ids[v])
        if key not in ranks:
            ranks[key] = (rank, ids[u + v])
    return ranks


def _bpe(
    symbols: list[int], ranks: dict[tuple[int, int], tuple[int, int]]
) -> tuple[list[int], tuple[int, int, int] | None]:
    """The tokenizers library's BPE on one word (lowest rank first, leftmost on ties)."""
    n = len(symbols)
    sym = list(symbols)
    prev = list(range(-1, n - 1))
    nxt = [*range(1, n), -1]
    alive = [True] * n
    heap = []
    for i in range(n - 1):
        m = ranks.get((sym[i], sym[i + 1]))
        if m is not None:
            heap.append((m[0], i, m[1]))
    heapq.heapify(heap)
    last = None
    while heap:
        rank, pos, new = heapq.heappop(heap)
        if not alive[pos] or nxt[pos] < 0:
            continue
        j = nxt[pos]
        m = ranks.get((sym[pos], sym[j]))
        if m is None or m[1] != new:
            continue
        last = (sym[pos], sym[j], rank)
        sym[pos] = new
        alive[j] = False
        nxt[pos] = nxt[j]
        if nxt[j] >= 0:
            prev[nxt[j]] = pos
        if prev[pos] >= 0:
            m = ranks.get((sym[prev[pos]], new))
            if m is not None:
                heapq.heappush(heap, (m[0], prev[pos], m[1]))
        if nxt[pos] >= 0:
            m = ranks.get((new, sym[nxt[pos]]))
            if m is not None:
                heapq.heappush(heap, (m[0], pos, m[1]))
    return [sym[i] for i in range(n) if alive[i]], last

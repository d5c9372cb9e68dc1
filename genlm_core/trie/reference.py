"""A deliberately simple trie, the oracle: dicts to build, NumPy to compute.

Its sums equal the numba kernels' bit for bit (docs/tries.md).
"""

from __future__ import annotations

import functools

import numpy as np

from genlm_core.trie.arrays import TrieArrays
from genlm_core.trie.base import CharacterTrieBase
from genlm_core.trie.vocab import EncodedVocab

__all__ = ["ReferenceTokenCharacterTrie"]


class ReferenceTokenCharacterTrie(CharacterTrieBase):
    """Pure Python/NumPy implementation of `TokenCharacterTrie` (genlm-trie-numba's)."""

    def _build(self, vocab: EncodedVocab) -> TrieArrays:
        offsets = vocab.offsets.tolist()
        codes = vocab.codes.tolist()
        children: list[dict[object, int]] = [{}]
        label = [-1]
        token = [-1]
        seen: dict[tuple[int, ...], int] = {}
        duplicates = []
        for i in range(len(offsets) - 1):
            word = codes[offsets[i] : offsets[i + 1]]
            node = 0
            for code in word:
                nxt = children[node].get(code)
                if nxt is None:
                    nxt = children[node][code] = len(children)
                    children.append({})
                    label.append(code)
                    token.append(-1)
                node = nxt
            children[node][(None, i)] = len(children)
            children.append({})
            label.append(-1)
            token.append(i)
            key = tuple(word)
            if key in seen:
                duplicates.append((seen[key], i))
            seen[key] = i
        # Post-order walk, children in insertion order: genlm-backend's numbering.
        order: list[int] = []
        stack = [(0, iter(children[0].values()))]
        while stack:
            node, it = stack[-1]
            child = next(it, None)
            if child is None:
                stack.pop()
                order.append(node)
            else:
                stack.append((child, iter(children[child].values())))
        new = np.empty(len(order), dtype=np.int64)
        new[order] = np.arange(len(order))
        n = len(order)
        parent = np.full(n, -1, dtype=np.int32)
        child_ptr = np.zeros(n + 1, dtype=np.int64)
        child_idx = []
        for old in order:
            kids = sorted(new[c] for c in children[old].values())
            child_idx.extend(kids)
            child_ptr[new[old] + 1] = len(kids)
            for c in kids:
                parent[c] = new[old]
        np.cumsum(child_ptr, out=child_ptr)
        # child_idx was appended in post-order of parents, which is ascending new id.
        lab = np.empty(n, dtype=np.int32)
        tok = np.empty(n, dtype=np.int32)
        lab[new] = label
        tok[new] = token
        token_leaf = np.empty(len(offsets) - 1, dtype=np.int32)
        leaves = np.flatnonzero(tok >= 0)
        token_leaf[tok[leaves]] = leaves
        return TrieArrays(
            parent=parent,
            label=lab,
            leaf_token=tok,
            child_ptr=child_ptr,
            child_idx=np.asarray(child_idx, dtype=np.int32),
            token_leaf=token_leaf,
            duplicates=np.asarray(duplicates, dtype=np.int64).reshape(-1, 2),
        )

    def _fill(self, op: str, ws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a = self._arrays
        nan = np.isnan(ws)
        bad = np.full(ws.shape[0], -1, dtype=np.int64)
        rows = np.flatnonzero(nan.any(axis=1))
        if rows.size:
            bad[rows] = nan[rows].argmax(axis=1)
        out = np.zeros((ws.shape[0], self.num_nodes), dtype=np.float64)
        if op == "max":
            out[:] = -np.inf
        out[:, a.token_leaf] = ws
        combine = np.add if op == "sum" else np.maximum
        for nodes in self._levels:
            combine.at(out, (slice(None), a.parent[nodes]), out[:, nodes])
        return out, bad

    @functools.cached_property
    def _levels(self) -> list[np.ndarray]:
        """Non-root nodes grouped by distance from the root, deepest first."""
        parent = self._arrays.parent.tolist()
        level = np.zeros(self.num_nodes, dtype=np.int64)
        for v in range(self.num_nodes - 2, -1, -1):  # a parent is numbered above its children
            level[v] = level[parent[v]] + 1
        nodes = np.arange(self.num_nodes - 1)
        return [nodes[level[:-1] == d] for d in range(int(level.max(initial=0)), 0, -1)]

"""Lazy dict-shaped views of a flat trie, in genlm-backend's format, built per node."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, overload

import numpy as np

if TYPE_CHECKING:
    from genlm_core.trie.arrays import TrieArrays

__all__ = ["ChildrenView", "PrefixView"]


class ChildrenView(Sequence[dict[Hashable, int]]):
    """``children[node]``: edge -> child, letters first-inserted first, as genlm-backend.

    Letter edges are keyed by the letter (an int for a byte); the edge to the leaf of
    vocabulary entry ``i`` is keyed ``leaf_key(i)`` (``(None, i)`` by default).
    """

    def __init__(
        self,
        arrays: TrieArrays,
        letter: Callable[[int], Any],
        leaf_key: Callable[[int], Hashable] = lambda i: (None, i),
    ) -> None:
        self._arrays = arrays
        self._letter = letter
        self._leaf_key = leaf_key
        self._cache: list[dict[Hashable, int] | None] = [None] * arrays.num_nodes

    def __len__(self) -> int:
        return len(self._cache)

    @overload
    def __getitem__(self, node: int) -> dict[Hashable, int]: ...

    @overload
    def __getitem__(self, node: slice) -> list[dict[Hashable, int]]: ...

    def __getitem__(self, node: int | slice) -> Any:
        if isinstance(node, slice):
            return [self[i] for i in range(*node.indices(len(self)))]
        node = int(node)
        cached = self._cache[node]  # also raises IndexError / handles negatives
        if cached is not None:
            return cached
        if node < 0:
            node += len(self)
        a = self._arrays
        kids = a.child_idx[a.child_ptr[node] : a.child_ptr[node + 1]].tolist()
        labels = a.label[kids].tolist()
        tokens = a.leaf_token[kids].tolist()
        letter, leaf_key = self._letter, self._leaf_key
        edges = {
            leaf_key(t) if code < 0 else letter(code): c
            for c, code, t in zip(kids, labels, tokens, strict=True)
        }
        self._cache[node] = edges
        return edges

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ChildrenView | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<children of a {len(self)}-node trie>"


class PrefixView(Mapping[int, list[Any]]):
    """``node2prefix[node]``: the letters from the root to ``node``; a leaf has its parent's.

    ``spell(code)`` gives the letters an edge adds (default: its one letter).
    """

    def __init__(
        self,
        arrays: TrieArrays,
        letter: Callable[[int], Any],
        spell: Callable[[int], list[Any]] | None = None,
    ) -> None:
        self._parent = arrays.parent
        self._label = arrays.label
        self._spell = spell if spell is not None else (lambda code: [letter(code)])
        self._cache: dict[int, list[Any]] = {}

    def __len__(self) -> int:
        return len(self._parent)

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self._parent)))

    def __contains__(self, node: object) -> bool:
        return isinstance(node, int | np.integer) and 0 <= node < len(self._parent)

    def __getitem__(self, node: int) -> list[Any]:
        if node not in self:
            raise KeyError(node)
        node = int(node)
        cached = self._cache.get(node)
        if cached is not None:
            return cached
        codes = []
        v = node
        while v >= 0:
            code = int(self._label[v])
            if code >= 0:
                codes.append(code)
            v = int(self._parent[v])
        prefix = [x for c in reversed(codes) for x in self._spell(c)]
        self._cache[node] = prefix
        return prefix

    def __repr__(self) -> str:
        return f"<node2prefix of a {len(self)}-node trie>"

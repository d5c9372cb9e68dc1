"""Lazy dict-shaped views of a flat trie, in genlm-backend's format, built per node."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from typing import Any, overload

import numpy as np

__all__ = ["ChildrenView", "PrefixView"]


class ChildrenView(Sequence[dict[Hashable, int]]):
    """``children[node]``: edge -> child, letters first-inserted first, as genlm-backend.

    Letter edges are keyed by the letter (an int for a byte); the edge to the leaf of
    vocabulary entry ``i`` is keyed ``leaf_key(i)`` (``(None, i)`` by default).
    """

    def __init__(
        self,
        child_ptr: np.ndarray,
        child_idx: np.ndarray,
        label: np.ndarray,
        leaf_token: np.ndarray,
        letter: Callable[[int], Any],
        leaf_key: Callable[[int], Hashable] = lambda i: (None, i),
    ) -> None:
        self._ptr = child_ptr
        self._idx = child_idx
        self._label = label
        self._leaf_token = leaf_token
        self._letter = letter
        self._leaf_key = leaf_key
        self._cache: list[dict[Hashable, int] | None] = [None] * (len(child_ptr) - 1)

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
        kids = self._idx[self._ptr[node] : self._ptr[node + 1]].tolist()
        labels = self._label[kids].tolist()
        tokens = self._leaf_token[kids].tolist()
        letter, leaf_key = self._letter, self._leaf_key
        edges = {
            leaf_key(t) if code < 0 else letter(code): c
            for c, code, t in zip(kids, labels, tokens, strict=True)
        }
        self._cache[node] = edges
        return edges

    def __iter__(self) -> Iterator[dict[Hashable, int]]:
        for i in range(len(self)):
            yield self[i]

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
        parent: np.ndarray,
        label: np.ndarray,
        letter: Callable[[int], Any],
        spell: Callable[[int], list[Any]] | None = None,
    ) -> None:
        self._parent = parent
        self._label = label
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

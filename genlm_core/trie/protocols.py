"""What code using a token trie may rely on: typing Protocols, no implementation.

Nodes are integers; node-indexed results are NumPy arrays of length
``len(trie.children)``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

__all__ = ["AsyncCharacterTrie", "CharacterTrie"]


@runtime_checkable
class CharacterTrie(Protocol):
    """A trie over a vocabulary's letter sequences (bytes, for real tokenizers).

    Attributes:
        decode: The vocabulary, as given: entry ``i`` is the word of weight ``ws[i]``.
        root: The root node (the empty prefix).
        children: ``children[node]`` maps an edge to a child node. Letter edges are
            keyed by the letter (an int for a byte); the edge to the leaf of
            vocabulary entry ``i`` is keyed ``(None, i)``.
        word2leaf: Word key -> leaf node. The key is ``(bytes, token_id)`` for a
            Token, the word itself otherwise.
        leaf2word: The inverse of ``word2leaf``.
        node2prefix: Node -> list of the letters on the path from the root.
    """

    decode: Sequence[Any]
    root: int

    @property
    def children(self) -> Sequence[Mapping[Hashable, int]]:
        """The edges out of every node."""
        ...

    @property
    def word2leaf(self) -> Mapping[Hashable, int]:
        """Word key -> leaf node."""
        ...

    @property
    def leaf2word(self) -> Mapping[int, Hashable]:
        """Leaf node -> word key."""
        ...

    @property
    def node2prefix(self) -> Mapping[int, list[Any]]:
        """Node -> letters from the root."""
        ...

    def weight_sum(self, ws: Any) -> np.ndarray:
        """Mass of every node: the sum of the weights of the tokens below it.

        Args:
            ws: One weight per vocabulary entry, shape ``(len(decode),)``.

        Returns:
            Node-indexed masses, shape ``(len(children),)``.
        """
        ...

    def weight_max(self, ws: Any) -> np.ndarray:
        """Max weight of the tokens below every node (correct for log-space weights).

        Args:
            ws: One weight per vocabulary entry, shape ``(len(decode),)``.

        Returns:
            Node-indexed maxima, shape ``(len(children),)``.
        """
        ...

    def batch_weight_sum(self, ws: Any) -> np.ndarray:
        """:meth:`weight_sum` of many distributions.

        Args:
            ws: Shape ``(batch, len(decode))``, or a sequence of 1-D weight vectors.

        Returns:
            Shape ``(batch, len(children))``.
        """
        ...

    def batch_weight_max(self, ws: Any) -> np.ndarray:
        """:meth:`weight_max` of many distributions.

        Args:
            ws: Shape ``(batch, len(decode))``, or a sequence of 1-D weight vectors.

        Returns:
            Shape ``(batch, len(children))``.
        """
        ...


@runtime_checkable
class AsyncCharacterTrie(Protocol):
    """An asynchronous front to a :class:`CharacterTrie` that batches concurrent requests.

    Attributes:
        trie: The synchronous trie doing the work.
    """

    trie: CharacterTrie

    async def weight_sum(self, ws: Any) -> np.ndarray:
        """Queue a :meth:`CharacterTrie.weight_sum`; concurrent calls are batched."""
        ...

    async def weight_max(self, ws: Any) -> np.ndarray:
        """Queue a :meth:`CharacterTrie.weight_max`; concurrent calls are batched."""
        ...

    async def cleanup(self) -> None:
        """Stop the background batching (idempotent)."""
        ...

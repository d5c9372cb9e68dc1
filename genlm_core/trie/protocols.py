"""What code using a token trie may rely on: typing Protocols, no implementation.

Nodes are integers; node-indexed results are NumPy arrays of length
``len(trie.children)``. [`TrieMode`][] is here too: byte tries (genlm-bytes'
``TokenByteTrie`` family) take it, and ``AsyncTokenByteTrie`` batches by it, whichever
plugin implements the trie.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

__all__ = ["AsyncCharacterTrie", "CharacterTrie", "TrieMode"]


class TrieMode(Enum):
    """How tokens spelling an EOS byte string count (genlm-bytes' ``TokenByteTrie``)."""

    WITHOUT_EOS = "without_eos"  # EOS tokens are ordinary tokens
    WITH_EOS = "with_eos"  # EOS tokens count only at eos_node (and the root)


@runtime_checkable
class CharacterTrie(Protocol):
    """A trie over a vocabulary's letter sequences (bytes, for real tokenizers).

    Attributes:
        decode: The vocabulary, as given: entry ``i`` is the word of weight ``ws[i]``.
        root: The root node (the empty prefix).
    """

    decode: Sequence[Any]
    root: int

    @property
    def children(self) -> Sequence[Mapping[Hashable, int]]:
        """``children[node]``: edge -> child. Leaf edges are keyed ``(None, i)``."""
        ...

    @property
    def word2leaf(self) -> Mapping[Hashable, int]:
        """Word key -> leaf: ``(bytes, token_id)`` for a Token, the word itself otherwise."""
        ...

    @property
    def leaf2word(self) -> Mapping[int, Hashable]:
        """Leaf node -> word key (the inverse of ``word2leaf``)."""
        ...

    @property
    def node2prefix(self) -> Mapping[int, list[Any]]:
        """Node -> list of the letters on the path from the root."""
        ...

    def weight_sum(self, ws: Any) -> np.ndarray:
        """Mass of every node, ``(len(children),)``, from one weight per entry of ``decode``."""
        ...

    def weight_max(self, ws: Any) -> np.ndarray:
        """Max weight of the tokens below every node (correct for log-space weights)."""
        ...

    def batch_weight_sum(self, ws: Any) -> np.ndarray:
        """[`weight_sum`][] of ``(batch, len(decode))`` weights (or a list of vectors)."""
        ...

    def batch_weight_max(self, ws: Any) -> np.ndarray:
        """[`weight_max`][] of ``(batch, len(decode))`` weights (or a list of vectors)."""
        ...


@runtime_checkable
class AsyncCharacterTrie(Protocol):
    """An asynchronous front to a [`CharacterTrie`][] that batches concurrent requests.

    Attributes:
        trie: The synchronous trie doing the work.
    """

    trie: CharacterTrie

    async def weight_sum(self, ws: Any) -> np.ndarray:
        """Queue a [`CharacterTrie.weight_sum`][]; concurrent calls are batched."""
        ...

    async def weight_max(self, ws: Any) -> np.ndarray:
        """Queue a [`CharacterTrie.weight_max`][]; concurrent calls are batched."""
        ...

    async def cleanup(self) -> None:
        """Stop the background batching (idempotent)."""
        ...

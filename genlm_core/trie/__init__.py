"""Token tries: a distribution over tokens -> the mass of every byte prefix.

Drop-in for ``genlm.backend.trie`` (and ``genlm.bytes.trie``: ``TokenByteTrie``,
``AsyncTokenByteTrie``, ``TrieMode``)::

    from genlm_core.trie import AsyncTokenCharacterTrie, TokenCharacterTrie

    trie = TokenCharacterTrie(byte_vocab)           # numba, CPU, exact
    masses = trie.weight_sum(probs)                 # node-indexed, masses[trie.root] == sum
    async_trie = AsyncTokenCharacterTrie.from_vocab(byte_vocab)   # best registered backend
    masses = await async_trie.weight_sum(probs)     # concurrent calls are batched

Implementations are plugins (``genlm_register_tries``); ``genlm backends`` lists them.
Names are imported lazily so ``import genlm_core.trie.protocols`` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from genlm_core._lazy import lazy_exports

__all__ = [
    "AsyncCharacterTrie",
    "AsyncTokenByteTrie",
    "AsyncTokenCharacterTrie",
    "CharacterTrie",
    "CharacterTrieBase",
    "InvalidVocabularyError",
    "InvalidWeightsError",
    "ParallelTokenCharacterTrie",
    "ReferenceTokenCharacterTrie",
    "TokenByteTrie",
    "TokenCharacterTrie",
    "TorchTokenCharacterTrie",
    "TrieMode",
    "VocabularyTypeError",
]

__getattr__, __dir__ = lazy_exports(globals())


if TYPE_CHECKING:  # pragma: no cover
    from genlm_core.trie.async_trie import AsyncTokenByteTrie, AsyncTokenCharacterTrie
    from genlm_core.trie.base import CharacterTrieBase
    from genlm_core.trie.byte_trie import TokenByteTrie, TrieMode
    from genlm_core.trie.cpu import ParallelTokenCharacterTrie, TokenCharacterTrie
    from genlm_core.trie.errors import (
        InvalidVocabularyError,
        InvalidWeightsError,
        VocabularyTypeError,
    )
    from genlm_core.trie.protocols import AsyncCharacterTrie, CharacterTrie
    from genlm_core.trie.reference import ReferenceTokenCharacterTrie
    from genlm_core.trie.torch_trie import TorchTokenCharacterTrie

"""Token tries: a distribution over tokens -> the mass of every byte prefix.

Drop-in for ``genlm.backend.trie`` (and ``genlm.bytes.trie``: ``TokenByteTrie``,
``AsyncTokenByteTrie``, ``TrieMode``)::

    from genlm_core.trie import AsyncTokenCharacterTrie, TokenCharacterTrie

    trie = TokenCharacterTrie(byte_vocab)           # numba, CPU, exact (genlm-trie-numba)
    masses = trie.weight_sum(probs)                 # node-indexed, masses[trie.root] == sum
    async_trie = AsyncTokenCharacterTrie.from_vocab(byte_vocab)   # best registered trie
    masses = await async_trie.weight_sum(probs)     # concurrent calls are batched

The core holds the protocols, the async front and the pure-NumPy ``reference`` trie;
the fast implementations are plugins (``genlm_register_tries``), ``genlm backends``
lists them. ``TokenCharacterTrie``, ``ParallelTokenCharacterTrie`` and ``TokenByteTrie``
are loaded from genlm-trie-numba, ``TorchTokenCharacterTrie`` from genlm-trie-torch
(the migration path of genlm-backend's names): without that distribution, the name
raises ``ModuleNotFoundError`` saying what to install. Names are imported lazily so
``import genlm_core.trie.protocols`` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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

#: The trie plugins the old names load from: import package -> distribution.
_PLUGINS = {"genlm_trie_numba": "genlm-trie-numba", "genlm_trie_torch": "genlm-trie-torch"}

_lookup, __dir__ = lazy_exports(globals())


def __getattr__(name: str) -> Any:  # noqa: D103 - the PEP 562 hook
    try:
        return _lookup(name)
    except ModuleNotFoundError as error:
        distribution = _PLUGINS.get(str(error.name))
        if distribution is None:
            raise
        raise ModuleNotFoundError(
            f"genlm_core.trie.{name} ships in {distribution}, a trie plugin: "
            f"pip install {distribution} (from a checkout: pip install "
            f"{_install_from_checkout(distribution)})",
            name=error.name,
        ) from None


def _install_from_checkout(distribution: str) -> str:
    """The editable-install arguments of a trie plugin in a checkout (numba's first)."""
    folders = ["plugins/genlm_trie_numba"]
    if distribution != "genlm-trie-numba":
        folders.append(f"plugins/{distribution.replace('-', '_')}")
    return " ".join(f"-e {f}" for f in folders)


if TYPE_CHECKING:  # pragma: no cover
    from genlm_core.trie.async_trie import AsyncTokenByteTrie, AsyncTokenCharacterTrie
    from genlm_core.trie.base import CharacterTrieBase
    from genlm_core.trie.errors import (
        InvalidVocabularyError,
        InvalidWeightsError,
        VocabularyTypeError,
    )
    from genlm_core.trie.protocols import AsyncCharacterTrie, CharacterTrie, TrieMode
    from genlm_core.trie.reference import ReferenceTokenCharacterTrie
    from genlm_trie_numba import ParallelTokenCharacterTrie, TokenByteTrie, TokenCharacterTrie
    from genlm_trie_torch import TorchTokenCharacterTrie

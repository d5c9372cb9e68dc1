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

import importlib.util
from typing import TYPE_CHECKING, Any

from genlm_core.lazy import lazy_exports

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
#: The names that live in a trie plugin -> its import package (as imported below).
_MOVED = {
    "ParallelTokenCharacterTrie": "genlm_trie_numba",
    "TokenByteTrie": "genlm_trie_numba",
    "TokenCharacterTrie": "genlm_trie_numba",
    "TorchTokenCharacterTrie": "genlm_trie_torch",
}

_lookup, __dir__ = lazy_exports(globals())


def __getattr__(name: str) -> Any:  # noqa: D103 - the PEP 562 hook
    package = _MOVED.get(name)
    if package is not None and not _importable(package):
        distribution = _PLUGINS[package]
        folders = dict.fromkeys(("genlm_trie_numba", package))  # numba's first: a dependency
        raise ModuleNotFoundError(
            f"genlm_core.trie.{name} ships in {distribution}, a trie plugin: "
            f"pip install {distribution} (from a checkout: pip install "
            f"{' '.join(f'-e plugins/{f}' for f in folders)})",
            name=package,
        )
    return _lookup(name)


def _importable(package: str) -> bool:
    """Whether ``package`` is installed: a regular package, not the folder left behind.

    ``pip uninstall`` leaves a plugin's folder when numba cached kernels in it; that
    folder would import as an empty namespace package.
    """
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return False
    return spec is not None and spec.origin is not None


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

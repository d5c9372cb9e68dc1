"""genlm-trie-numba: genlm-core's fast token tries, on flat arrays and numba kernels.

``TokenCharacterTrie`` and ``ParallelTokenCharacterTrie`` are genlm-backend 0.3.1's
tries, ``TokenByteTrie`` is genlm-bytes 0.2.0's; genlm-core keeps their old import path
(``genlm_core.trie``), which loads them from here. Installing this distribution
registers the ``numba``, ``numba-byte``, ``sequential`` and ``parallel`` tries through
the ``genlm.tries`` entry point (`genlm_trie_numba._plugin`), so
``AsyncTokenCharacterTrie.from_vocab`` picks them over the core's reference trie::

    from genlm_trie_numba import TokenCharacterTrie

    trie = TokenCharacterTrie(lm.byte_vocab)
    masses = trie.weight_sum(probs)     # node-indexed, masses[trie.root] == sum

Names load lazily, so the entry-point module imports neither numba nor torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from genlm_core.lazy import lazy_exports

__version__ = "0.1.0"

__all__ = [
    "BatchOutputs",
    "MassPlan",
    "ParallelTokenCharacterTrie",
    "TokenByteTrie",
    "TokenCharacterTrie",
    "TrieMode",
    "build_trie_arrays",
    "plan_masses",
]

if TYPE_CHECKING:  # what static tools (type checkers, the docs' API pages) see
    from genlm_trie_numba._build import MassPlan, build_trie_arrays, plan_masses
    from genlm_trie_numba._outputs import BatchOutputs
    from genlm_trie_numba.byte_trie import TokenByteTrie, TrieMode
    from genlm_trie_numba.cpu import ParallelTokenCharacterTrie, TokenCharacterTrie


__getattr__, __dir__ = lazy_exports(globals())

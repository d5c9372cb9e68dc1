"""The core's own trie, registered in ``genlm.tries`` like any plugin's.

Only the pure-NumPy ``reference`` trie: slow, simple, the oracle of the others and what
``AsyncTokenCharacterTrie.from_vocab`` picks when no trie plugin is installed. The fast
ones ship as plugins (genlm-trie-numba: ``numba``, ``numba-byte``, ``sequential``,
``parallel``; genlm-trie-torch: ``torch-cuda``), which every official backend brings.
"""

from __future__ import annotations

from genlm_core.plugins import TrieSpec, hookimpl

_SPECS = (
    TrieSpec(
        name="reference",
        loader="genlm_core.trie.reference:ReferenceTokenCharacterTrie",
        priority=10,
        description="dicts + NumPy: slow, simple, the oracle for the others",
    ),
)


@hookimpl
def genlm_register_tries(register):
    """Register the core's trie implementations."""
    for spec in _SPECS:
        register(spec)

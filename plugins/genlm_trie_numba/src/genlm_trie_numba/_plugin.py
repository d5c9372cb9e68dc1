"""Entry point of genlm-trie-numba: registers its tries in ``genlm.tries``.

genlm imports this module whenever tries are listed or built, so it imports only
``genlm_core.plugins``: the loader strings name the classes, imported (with numba) when
a trie is built.
"""

from __future__ import annotations

from genlm_core.plugins import Availability, TrieSpec, hookimpl, module_available

DISTRIBUTION = "genlm-trie-numba"


def _numba_available() -> Availability:
    if not module_available("numba"):
        return Availability.no(f"needs numba, a dependency of {DISTRIBUTION}: pip install numba")
    return Availability.yes("CPU, numba")


_SPECS = (
    TrieSpec(
        name="numba",
        loader="genlm_trie_numba.cpu:TokenCharacterTrie",
        priority=100,
        check=_numba_available,
        description="flat arrays + exact numba kernels, batches parallel across cores",
    ),
    # genlm-backend's AsyncTokenCharacterTrie.from_vocab(backend=...) names.
    TrieSpec(
        name="sequential",
        loader="genlm_trie_numba.cpu:TokenCharacterTrie",
        auto=False,
        check=_numba_available,
        description="genlm-backend name: TokenCharacterTrie (same as numba)",
    ),
    TrieSpec(
        name="parallel",
        loader="genlm_trie_numba.cpu:ParallelTokenCharacterTrie",
        auto=False,
        check=_numba_available,
        description="genlm-backend name: ParallelTokenCharacterTrie (float32; CUDA when available)",
    ),
    TrieSpec(
        name="numba-byte",
        loader="genlm_trie_numba.byte_trie:TokenByteTrie",
        priority=100,
        check=_numba_available,
        kind="byte",
        description="genlm-bytes' TokenByteTrie (EOS modes, token-id weights) on the numba kernels",
    ),
)


@hookimpl
def genlm_register_tries(register):
    """Register the numba tries (character and byte)."""
    for spec in _SPECS:
        register(spec)

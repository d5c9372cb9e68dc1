"""genlm-bytes' ``genlm.bytes.trie`` (import path kept): from the core and genlm-trie-numba."""

from genlm_core.trie.async_trie import AsyncTokenByteTrie
from genlm_trie_numba.byte_trie import EOS, TokenByteTrie, TrieMode

__all__ = ["EOS", "AsyncTokenByteTrie", "TokenByteTrie", "TrieMode"]

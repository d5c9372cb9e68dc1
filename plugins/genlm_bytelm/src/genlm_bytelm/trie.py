"""genlm-bytes' ``genlm.bytes.trie`` (import path kept): its names, from the core."""

from genlm_core.trie.async_trie import AsyncTokenByteTrie
from genlm_core.trie.byte_trie import EOS, TokenByteTrie, TrieMode

__all__ = ["EOS", "AsyncTokenByteTrie", "TokenByteTrie", "TrieMode"]

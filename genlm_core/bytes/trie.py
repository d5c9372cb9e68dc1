"""genlm-bytes' ``genlm.bytes.trie`` names: the core's byte tries (import path kept)."""

from genlm_core.trie.async_trie import AsyncTokenByteTrie
from genlm_core.trie.byte_trie import EOS, TokenByteTrie, TrieMode

__all__ = ["EOS", "AsyncTokenByteTrie", "TokenByteTrie", "TrieMode"]

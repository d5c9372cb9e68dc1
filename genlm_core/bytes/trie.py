"""genlm-bytes' ``genlm.bytes.trie`` (import path kept): :mod:`genlm_core.compat.genlm_bytes`."""

from genlm_core.compat.genlm_bytes import EOS, AsyncTokenByteTrie, TokenByteTrie, TrieMode

__all__ = ["EOS", "AsyncTokenByteTrie", "TokenByteTrie", "TrieMode"]

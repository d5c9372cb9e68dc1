"""genlm-bytes 0.2.0's ``genlm.bytes.util`` and ``genlm.bytes.trie`` names, from the core.

They stay importable at ``genlm_core.bytes.util`` and ``genlm_core.bytes.trie`` (each
re-exports its names from here), so migrating from genlm-bytes is an import rename.
"""

from genlm_core.bytes.chart import Chart
from genlm_core.bytes.display import escape, format_byte, format_table
from genlm_core.bytes.probs import LazyByteProbs, logsumexp
from genlm_core.trie.async_trie import AsyncTokenByteTrie
from genlm_core.trie.byte_trie import EOS, TokenByteTrie, TrieMode

__all__ = [
    "EOS",
    "AsyncTokenByteTrie",
    "Chart",
    "LazyByteProbs",
    "TokenByteTrie",
    "TrieMode",
    "escape",
    "format_byte",
    "format_table",
    "logsumexp",
]

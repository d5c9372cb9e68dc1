"""The byte-level beam: genlm-bytes' ``genlm.bytes.byte_lm`` (import path kept)."""

from genlm_bytelm.byte_lm.beam import ByteBeamState
from genlm_bytelm.byte_lm.lm_state import StatefulTokenizedLM
from genlm_bytelm.byte_lm.params import BeamParams
from genlm_bytelm.byte_lm.trie_state import LazyTrieState

__all__ = ["BeamParams", "ByteBeamState", "LazyTrieState", "StatefulTokenizedLM"]

"""``canonical_filter``: the filter of a tokenizer's family (SentencePiece BPE or byte-level)."""

from __future__ import annotations

from typing import Any

from genlm_core.bytes.exact.canonical.filter import CanonicalFilter
from genlm_core.bytes.exact.canonical.sentencepiece import SentencePieceFilter
from genlm_core.bytes.exact.canonical.sentencepiece_spec import is_sentencepiece

__all__ = ["canonical_filter"]


def canonical_filter(
    tokenizer: Any, byte_vocab: list[Any]
) -> CanonicalFilter | SentencePieceFilter:
    """The canonical filter of ``tokenizer``'s family (see module doc)."""
    if is_sentencepiece(tokenizer):
        return SentencePieceFilter(tokenizer, byte_vocab)
    return CanonicalFilter(tokenizer, byte_vocab)

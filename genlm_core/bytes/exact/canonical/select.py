"""``canonical_filter``: the canonical filter that covers a tokenizer's family.

BPE with byte fallback (SentencePiece-style: Llama-2, Mistral v0.1, Gemma 3) goes to
:class:`~.sentencepiece.SentencePieceFilter`; everything else to
:class:`~.filter.CanonicalFilter` (byte-level BPE), which raises
``CanonicalityUnsupportedError`` for what it does not cover.
"""

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

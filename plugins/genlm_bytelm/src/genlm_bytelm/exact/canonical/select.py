"""``canonical_filter``: the filter of a tokenizer's family, with its added tokens."""

from __future__ import annotations

from typing import Any

from genlm_bytelm.exact.canonical.added import with_added_tokens
from genlm_bytelm.exact.canonical.filter import CanonicalFilter
from genlm_bytelm.exact.canonical.sentencepiece import SentencePieceFilter
from genlm_bytelm.exact.canonical.sentencepiece_spec import is_sentencepiece

__all__ = ["canonical_filter"]


def canonical_filter(tokenizer: Any, byte_vocab: list[Any]) -> Any:
    """The canonical filter of ``tokenizer``: its BPE family's, within its added-token cuts."""
    if is_sentencepiece(tokenizer):
        inner: Any = SentencePieceFilter(tokenizer, byte_vocab)
    else:
        inner = CanonicalFilter(tokenizer, byte_vocab)
    return with_added_tokens(inner, tokenizer)

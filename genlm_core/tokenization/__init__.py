"""Exact byte strings for a tokenizer's vocabulary: ``Token`` and ``decode_vocab``.

``decode_vocab(tokenizer)`` returns ``(byte_vocab, str_vocab)`` as genlm-backend does,
with ``byte_vocab[i].token_id == i`` for every id (holes and padding are empty tokens).
The strategy is read from the tokenizer's declared decoder and checked by a round
trip; unsupported tokenizers raise
[`UnsupportedTokenizerError`][genlm_core.errors.UnsupportedTokenizerError].
"""

from __future__ import annotations

from genlm_core.tokenization.token import Token
from genlm_core.tokenization.vocab import (
    BYTE2STR_FALLBACKS,
    InvalidArgumentError,
    bytes_to_strs,
    decode_vocab,
    get_byte_vocab,
)

__all__ = [
    "BYTE2STR_FALLBACKS",
    "InvalidArgumentError",
    "Token",
    "bytes_to_strs",
    "decode_vocab",
    "get_byte_vocab",
]

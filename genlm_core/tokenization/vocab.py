"""``decode_vocab``: a tokenizer's vocabulary as ``Token`` bytes and display strings."""

from __future__ import annotations

import operator
import re
from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

from genlm_core.errors import InvalidArgumentError
from genlm_core.tokenization.byte_level import bytes_to_unicode
from genlm_core.tokenization.strategies import read_byte_vocab, tokenizer_name
from genlm_core.tokenization.token import Token, gc_paused, tokens_from_bytes

__all__ = [
    "BYTE2STR_FALLBACKS",
    "InvalidArgumentError",
    "bytes_to_strs",
    "decode_vocab",
    "get_byte_vocab",
]

BYTE2STR_FALLBACKS = ("tokenizer", "latin1", "replace")
# What ``bytes.decode("utf-8", "surrogateescape")`` makes of bytes that are not UTF-8.
# A valid UTF-8 string never decodes to a lone surrogate, so this finds exactly the
# tokens that failed to decode.
_ESCAPED = re.compile("[\udc80-\udcff]")


def _undecodable_ids(strings: Sequence[str]) -> list[int]:
    """Ids whose string holds surrogate escapes, found with one regex scan of the lot."""
    joined = "".join(strings)
    positions = [m.start() for m in _ESCAPED.finditer(joined)]
    if not positions:
        return []
    ends = list(accumulate(map(len, strings)))
    return sorted({bisect_right(ends, p) for p in positions})


def _tokenizer_string(tokenizer: Any, token_id: int, data: bytes) -> str:
    """``convert_ids_to_tokens(token_id)``, else the bytes in GPT-2's byte alphabet.

    Tokenizers with no string form (tiktoken) get what a byte-level tokenizer would show.
    """
    convert = getattr(tokenizer, "convert_ids_to_tokens", None)
    if callable(convert):
        text = convert(token_id)
        if isinstance(text, str):
            return text
    alphabet = bytes_to_unicode()
    return "".join(alphabet[b] for b in data)


def bytes_to_strs(
    byte_strings: Sequence[bytes],
    texts: Sequence[str | None] | None,
    tokenizer: Any,
    byte2str_fallback: str = "tokenizer",
) -> list[str]:
    """One display string per id (ids may share one): UTF-8 where valid, else the fallback.

    Args:
        byte_strings: Bytes per token id.
        texts: The tokenizer's own string per id (``convert_ids_to_tokens``), or
            ``None`` entries where unknown; used by the ``"tokenizer"`` fallback.
        tokenizer: Asked for ``convert_ids_to_tokens`` when ``texts`` has no entry.
        byte2str_fallback: For bytes that are not valid UTF-8: ``"tokenizer"`` (the
            tokenizer's own token string, e.g. ``"âĢ"`` for a byte-level token; GPT-2's
            byte alphabet when the tokenizer has no string form, as with tiktoken),
            ``"latin1"`` (one character per byte), ``"replace"`` (U+FFFD for bad bytes).
    """
    strings = [b.decode("utf-8", "surrogateescape") for b in byte_strings]
    for i in _undecodable_ids(strings):
        data = byte_strings[i]
        if byte2str_fallback == "latin1":
            strings[i] = data.decode("latin-1")
        elif byte2str_fallback == "replace":
            strings[i] = data.decode("utf-8", errors="replace")
        elif texts is not None and texts[i] is not None:
            strings[i] = texts[i]
        else:
            strings[i] = _tokenizer_string(tokenizer, i, data)
    return strings


def _logits_width(vocab_size: Any) -> int | None:
    """``vocab_size`` as an int (numpy ints welcome), or ``None``; anything else is an error."""
    if vocab_size is None:
        return None
    try:
        width = operator.index(vocab_size)
    except TypeError:
        width = -1
    if isinstance(vocab_size, bool) or width < 0:
        raise InvalidArgumentError(
            "vocab_size must be a non-negative int (the model's logits width) or None, "
            f"got {vocab_size!r}"
        )
    return width


def decode_vocab(
    tokenizer: Any, byte2str_fallback: str = "tokenizer", vocab_size: int | None = None
) -> tuple[list[Token], list[str]]:
    """Decode a tokenizer's vocabulary into exact byte strings and display strings.

    The strategy follows the tokenizer's declared decoder and is checked by a round
    trip through it; added and special tokens become their text encoded as UTF-8, as
    in genlm-backend. Nothing is downloaded.

    Args:
        tokenizer: A Hugging Face tokenizer (fast or slow), a ``tokenizers.Tokenizer``,
            or a tiktoken-style tokenizer.
        byte2str_fallback: How ``str_vocab`` spells tokens that are not valid UTF-8:
            ``"tokenizer"`` (default), ``"latin1"`` or ``"replace"``; see
            [`bytes_to_strs`][].
        vocab_size: The model's logits width. When larger than the tokenizer's id range,
            the vocabulary is padded with empty tokens up to it. ``None``: the
            tokenizer's largest id + 1.

    Returns:
        ``(byte_vocab, str_vocab)``: ``byte_vocab[i]`` is ``Token(i, bytes)`` for every
        id ``i`` (empty at holes and padding); ``str_vocab[i]`` its display string.

    Raises:
        InvalidArgumentError: ``byte2str_fallback`` is not one of the three options, or
            ``vocab_size`` is smaller than the tokenizer's largest id + 1.
        UnsupportedTokenizerError: The vocabulary cannot be decoded to exact bytes
            (e.g. a WordPiece decoder, or SentencePiece without byte fallback); the
            message names the decoder.
    """
    if byte2str_fallback not in BYTE2STR_FALLBACKS:
        raise InvalidArgumentError(
            f"unknown byte2str_fallback strategy {byte2str_fallback!r}: use one of "
            f"{', '.join(map(repr, BYTE2STR_FALLBACKS))}"
        )
    width = _logits_width(vocab_size)
    with gc_paused():
        raw = read_byte_vocab(tokenizer)
        byte_strings = raw.byte_strings
        size = len(byte_strings)
        padding = 0
        if width is not None:
            if width < size:
                raise InvalidArgumentError(
                    f"vocab_size={width} is smaller than the id range of tokenizer "
                    f"{tokenizer_name(tokenizer)!r}: its largest token id is {size - 1}, so "
                    f"logits need at least {size} entries. Pass the model's logits width "
                    "(e.g. config.vocab_size), or None."
                )
            padding = width - size
        if padding:
            byte_strings = byte_strings + [b""] * padding
        byte_vocab = tokens_from_bytes(byte_strings)
        str_vocab = bytes_to_strs(raw.byte_strings, raw.texts, tokenizer, byte2str_fallback)
        str_vocab.extend([""] * padding)
    return byte_vocab, str_vocab


def get_byte_vocab(tokenizer: Any) -> list[bytes]:
    """The byte string of every token id up to the largest (plain bytes; ``b""`` at holes).

    Raises:
        UnsupportedTokenizerError: As for [`decode_vocab`][].
    """
    with gc_paused():
        return read_byte_vocab(tokenizer).byte_strings

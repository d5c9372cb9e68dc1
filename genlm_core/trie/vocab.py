"""Turn a vocabulary (Tokens, bytes, other iterables) into flat letter codes.

A byte is its own code (0-255); any other letter gets a code from 256 up, in order of
first appearance (equal letters share one).
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from genlm_core.trie.errors import InvalidVocabularyError

__all__ = [
    "OTHER",
    "PLAIN_BYTES",
    "TOKEN",
    "EncodedVocab",
    "encode_vocab",
    "is_token_type",
    "warn_plain_bytes",
    "word_key",
]

TOKEN, PLAIN_BYTES, OTHER = 0, 1, 2


@dataclass(frozen=True)
class EncodedVocab:
    """A vocabulary as concatenated letter codes.

    Attributes:
        codes: Every entry's codes, concatenated (int32).
        offsets: Entry ``i`` is ``codes[offsets[i]:offsets[i + 1]]`` (int64).
        letters: The letter of code ``256 + j`` is ``letters[j]``.
        kinds: Per entry ``TOKEN``, ``PLAIN_BYTES`` or ``OTHER`` (int8), or None when
            every entry is a Token.
    """

    codes: np.ndarray
    offsets: np.ndarray
    letters: tuple[Any, ...]
    kinds: np.ndarray | None

    def kind(self, i: int) -> int:
        """The kind of entry ``i``."""
        return TOKEN if self.kinds is None else int(self.kinds[i])

    def letter(self, code: int) -> Any:
        """The letter object of a code (an int for a byte)."""
        return code if code < 256 else self.letters[code - 256]


def is_token_type(t: type) -> bool:
    """Whether ``t`` is a Token class (genlm-core's or genlm-backend's): bytes + token_id."""
    return issubclass(t, bytes) and t is not bytes and hasattr(t, "byte_string")


def word_key(item: Any, kind: int) -> Hashable:
    """The ``word2leaf`` key of a vocabulary entry, as genlm-backend defines it."""
    if kind == TOKEN:
        return (bytes(item), item.token_id)
    return item


def _outside_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside this package (the user's call)."""
    here = os.path.dirname(os.path.abspath(__file__))
    frame = sys._getframe(1)
    level = 1
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == here:
        frame = frame.f_back
        level += 1
    return level


def warn_plain_bytes(owner: str = "a token trie") -> None:
    """Warn (at the user's call, naming the ``owner`` trie) that plain bytes are deprecated."""
    stacklevel = _outside_stacklevel()
    warnings.warn(
        f"Passing plain bytes to {owner} is deprecated: pass Token objects "
        "(genlm_core.tokenization.decode_vocab returns them), so several token ids "
        "may spell the same bytes.",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


def _offsets(lengths: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def encode_vocab(decode: Sequence[Any], owner: str = "a token trie") -> EncodedVocab:
    """Encode Tokens, plain ``bytes`` (deprecated: warns naming ``owner``) or iterables.

    Raises:
        InvalidVocabularyError: An entry is not iterable or has unhashable letters.
    """
    n = len(decode)
    types = set(map(type, decode))
    if all(issubclass(t, bytes) for t in types):
        lengths = np.fromiter(map(len, decode), dtype=np.int64, count=n)
        codes = np.frombuffer(b"".join(decode), dtype=np.uint8).astype(np.int32)
        if all(is_token_type(t) for t in types):
            return EncodedVocab(codes, _offsets(lengths), (), None)
        kinds = np.fromiter(
            (TOKEN if is_token_type(type(x)) else PLAIN_BYTES for x in decode),
            dtype=np.int8,
            count=n,
        )
        warn_plain_bytes(owner)
        return EncodedVocab(codes, _offsets(lengths), (), kinds)
    return _encode_mixed(decode, owner)


def _encode_mixed(decode: Sequence[Any], owner: str) -> EncodedVocab:
    """Slow path: some entries are not bytes; map their letters to codes >= 256."""
    n = len(decode)
    kinds = np.empty(n, dtype=np.int8)
    lengths = np.empty(n, dtype=np.int64)
    table: dict[Any, int] = {i: i for i in range(256)}
    letters: list[Any] = []
    bytes_items: list[bytes] = []
    other: list[tuple[int, list[int]]] = []
    for i, item in enumerate(decode):
        if isinstance(item, bytes):
            kinds[i] = TOKEN if is_token_type(type(item)) else PLAIN_BYTES
            lengths[i] = len(item)
            bytes_items.append(item)
            continue
        kinds[i] = OTHER
        try:
            hash(item)
        except TypeError:
            raise InvalidVocabularyError(
                f"vocabulary entry {i} is {item!r}, which is unhashable; entries other "
                f"than bytes must be hashable (they key word2leaf), e.g. use a tuple"
            ) from None
        try:
            seq = list(item)
        except TypeError:
            raise InvalidVocabularyError(
                f"vocabulary entry {i} is {item!r} ({type(item).__name__}), which is not "
                f"iterable; entries must be Tokens, bytes or iterables of letters"
            ) from None
        word = []
        for letter in seq:
            try:
                code = table.get(letter)
            except TypeError:
                raise InvalidVocabularyError(
                    f"vocabulary entry {i} ({item!r}) has the unhashable letter {letter!r}; "
                    f"letters must be hashable (ints for bytes)"
                ) from None
            if code is None:
                code = table[letter] = 256 + len(letters)
                letters.append(letter)
            word.append(code)
        lengths[i] = len(word)
        other.append((i, word))
    offsets = _offsets(lengths)
    codes = np.empty(int(offsets[-1]), dtype=np.int32)
    is_bytes = kinds != OTHER
    if bytes_items:
        flat = np.frombuffer(b"".join(bytes_items), dtype=np.uint8)
        blens = lengths[is_bytes]
        starts = offsets[:-1][is_bytes] - np.concatenate(([0], np.cumsum(blens)[:-1]))
        codes[np.repeat(starts, blens) + np.arange(len(flat))] = flat
    for i, word in other:
        codes[offsets[i] : offsets[i + 1]] = word
    if np.any(kinds == PLAIN_BYTES):
        warn_plain_bytes(owner)
    return EncodedVocab(codes, offsets, tuple(letters), kinds)

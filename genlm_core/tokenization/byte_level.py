"""Byte-level BPE (GPT-2, Llama-3, Qwen, DeepSeek, cl100k, ...): token strings to bytes.

Each byte is one printable character (GPT-2's alphabet: ``"Ġ"`` is the space); the
whole vocabulary is decoded at once through a numpy table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from itertools import accumulate

import numpy as np

__all__ = ["bytes_to_unicode", "byte_level_bytes", "gpt2_byte_table", "byte_table_from_decoder"]


@cache
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte alphabet: byte value 0..255 -> the printable character standing for it.

    Printable Latin-1 bytes stand for themselves; the other 68 (controls, space, DEL,
    NBSP, soft hyphen) are shifted to ``chr(256 + k)`` in byte order.
    """
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    alphabet = {b: chr(b) for b in printable}
    shifted = (b for b in range(256) if b not in alphabet)
    for k, b in enumerate(shifted):
        alphabet[b] = chr(256 + k)
    return dict(sorted(alphabet.items()))


@cache
def gpt2_byte_table() -> np.ndarray:
    """Code point -> byte for GPT-2's alphabet, ``-1`` for characters outside it."""
    return byte_table_from_decoder({ch: b for b, ch in bytes_to_unicode().items()})


def byte_table_from_decoder(byte_decoder: Mapping[str, int]) -> np.ndarray:
    """A ``{character: byte}`` mapping (a slow tokenizer's ``byte_decoder``) as a table.

    An int16 array indexed by code point: the byte, or ``-1`` where unmapped.
    """
    size = max((ord(ch) for ch in byte_decoder), default=-1) + 1
    table = np.full(size, -1, dtype=np.int16)
    for ch, b in byte_decoder.items():
        table[ord(ch)] = b
    return table


def byte_level_bytes(texts: Sequence[str], table: np.ndarray) -> tuple[list[bytes], list[int]]:
    """Decode byte-level token strings (one per id) through ``table``, all at once.

    Returns ``(byte_strings, unmapped)``: the bytes per id, and the ids whose string
    holds a character the table does not map (their entry is for the caller to replace).
    """
    joined = "".join(texts)
    codes = np.frombuffer(joined.encode("utf-32-le"), dtype="<u4")
    inside = codes < len(table)
    values = table[np.where(inside, codes, 0)]
    values[~inside] = -1
    data = values.astype(np.uint8).tobytes()
    offsets = list(accumulate(map(len, texts), initial=0))  # code points == UTF-32 units
    byte_strings = [data[a:b] for a, b in zip(offsets, offsets[1:], strict=False)]

    bad_positions = np.flatnonzero(values < 0)
    if bad_positions.size == 0:
        return byte_strings, []
    owners = np.searchsorted(np.asarray(offsets), bad_positions, side="right") - 1
    return byte_strings, np.unique(owners).tolist()

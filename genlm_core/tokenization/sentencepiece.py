"""SentencePiece vocabularies (Llama-2, Mistral, Gemma): pieces to bytes.

``"▁"`` stands for the space; without the 256 byte-fallback pieces ``<0x00>`` ..
``<0xFF>`` a vocabulary cannot spell arbitrary text, so it is refused, not decoded lossily.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["META_SYMBOL", "byte_piece_ids", "sentencepiece_bytes"]

META_SYMBOL = "\u2581"  # "▁", SentencePiece's stand-in for the space
_SINGLE_BYTES = [bytes([b]) for b in range(256)]


def byte_piece_ids(piece_to_id: Mapping[str, int]) -> dict[int, int]:
    """The byte-fallback pieces ``<0xAB>`` of a vocabulary: token id -> the byte it spells."""
    found: dict[int, int] = {}
    for b in range(256):
        for name in (f"<0x{b:02X}>", f"<0x{b:02x}>"):
            token_id = piece_to_id.get(name)
            if token_id is not None:
                found[token_id] = b
    return found


def sentencepiece_bytes(
    texts: Sequence[str], byte_pieces: Mapping[int, int], meta_symbol: str = META_SYMBOL
) -> list[bytes]:
    """Decode SentencePiece pieces: meta symbol -> space, ``<0xAB>`` -> that byte, else UTF-8.

    ``texts`` has one piece per id; ``byte_pieces`` is from [`byte_piece_ids`][].
    """
    byte_strings = [text.replace(meta_symbol, " ").encode() for text in texts]
    for token_id, b in byte_pieces.items():
        byte_strings[token_id] = _SINGLE_BYTES[b]
    return byte_strings

"""``Pending``: the unsettled end of a context, what canonicality of what follows needs.

The text before a context's last *settled* pre-token boundary is canonical whatever
follows; the tokens after it are kept, with where each ends in characters.
"""

from __future__ import annotations

from genlm_bytelm.exact.canonical.tokens import utf8_length

__all__ = ["EMPTY", "Pending", "missing_bytes"]


class Pending:
    """The unsettled end of a context (``segment``: its last NFC segment, see [`.nfc`][])."""

    __slots__ = ("data", "ends", "ids", "partial", "segment", "text")

    def __init__(
        self, ids: tuple[int, ...], data: bytes, byte_vocab: list[bytes], segment: str = ""
    ) -> None:
        self.ids = ids
        self.data = data
        self.segment = segment
        ends: list[int | None] = []
        position = 0
        decoded = 0
        for t in ids:
            position += len(byte_vocab[t])
            try:
                decoded = len(data[:position].decode("utf-8"))
                ends.append(decoded)
            except UnicodeDecodeError:
                ends.append(None)
        self.ends = tuple(ends)
        text, partial = _complete_prefix(data)
        self.text = text
        self.partial = partial

    def __repr__(self) -> str:
        return f"Pending({self.ids}, {self.data!r}, segment={self.segment!r})"


def _complete_prefix(data: bytes) -> tuple[str, bytes]:
    """``data`` decoded up to a trailing partial character, and that character's bytes."""
    for back in range(0, min(3, len(data)) + 1):
        try:
            return data[: len(data) - back].decode("utf-8"), data[len(data) - back :]
        except UnicodeDecodeError:
            continue
    return data.decode("utf-8", errors="replace"), b""


def missing_bytes(partial: bytes) -> int:
    """How many continuation bytes the character started by ``partial`` still needs."""
    return utf8_length(partial[0]) - len(partial)


#: The pending part of the empty context (just the start token).
EMPTY = Pending((), b"", [])

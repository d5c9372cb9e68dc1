r"""Vocabulary tokens as text: split characters, and the ways to complete them.

A token ending inside a UTF-8 character is judged with completions of it
([`completions`][], docs/bytes-design.md, *How the filter computes it*).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["LEAD", "TEXT", "TRAIL", "Completion", "completions", "split_utf8", "utf8_length"]

#: Witnesses kept per (token, completed character class): a context can rule out some.
WITNESSES = 3


#: Fields of [`split_utf8`][]'s tuples: plain tuples, not NamedTuples, because the
#: garbage collector stops tracking tuples of strings (128k of them lengthened every
#: full collection, which pauses the event loop: 103-106 ms stalls measured).
LEAD, TEXT, TRAIL = 0, 1, 2


def split_utf8(data: bytes) -> tuple[bytes, str, bytes] | None:
    """A token's bytes as (continuation bytes, whole characters, a started character), or None."""
    k = 0
    while k < min(3, len(data)) and 0x80 <= data[k] <= 0xBF:
        k += 1
    lead, rest = data[:k], data[k:]
    trail = b""
    for back in range(1, min(4, len(rest)) + 1):
        b = rest[-back]
        if 0x80 <= b <= 0xBF:
            continue
        need = utf8_length(b)
        if need > back:
            trail = rest[-back:]
            if not _completable(trail):
                return None
        break
    middle = rest[: len(rest) - len(trail)]
    try:
        text = middle.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return (lead, text, trail)  # a plain tuple: see LEAD


def utf8_length(lead: int) -> int:
    """Bytes of the UTF-8 character ``lead`` starts (0: not a lead byte)."""
    if lead < 0x80:
        return 1
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0  # not a lead byte


def _completable(trail: bytes) -> bool:
    need = utf8_length(trail[0]) - len(trail)
    return need > 0 and any(_decodes(trail + bytes([x]) + b"\x80" * (need - 1)) for x in _CONT)


def _decodes(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


_CONT = range(0x80, 0xC0)


@dataclass(frozen=True)
class Completion:
    """Bytes ``rest`` completing a token's last character (``text``), spelled by ``tokens``."""

    text: str
    rest: bytes
    tokens: tuple[int, ...]


def completions(
    token: int,
    trail: bytes,
    byte_ids: dict[bytes, int],
    pairs: Any,
    classes: Any,
    mixed: dict[int, list[tuple[int, bytes, str]]],
    distinct: Any = None,
) -> dict[tuple[Any, ...], list[Completion]]:
    """Ways to complete ``token``'s partial last character, grouped by class string.

    Continuation-byte tokens or one ``mixed`` token (finishing it and adding a character),
    their pairs left alone by BPE; at most [`WITNESSES`][] per class string and first
    completing token, further split by ``distinct`` (NFC, [`.nfc`][]).
    """
    need = utf8_length(trail[0]) - len(trail)
    found: dict[Any, list[Completion]] = {}
    bad = pairs.invalid_after(token)
    for rest in _byte_strings(need):
        try:
            char = (trail + rest).decode("utf-8")
        except UnicodeDecodeError:
            continue
        k = (classes.of(char, False),)
        if distinct is not None:
            k = (*k, distinct(char))
        first = _first(rest, byte_ids, bad)
        if first is None or len(found.get((*k, first), ())) >= WITNESSES:
            continue
        spelled = _spell(token, rest, byte_ids, pairs)
        if spelled is not None and len(found.get((*k, spelled[0]), ())) < WITNESSES:
            found.setdefault((*k, spelled[0]), []).append(Completion(char, rest, spelled))
    for other, lead, extra in mixed.get(need, ()):
        if bad[other]:
            continue
        try:
            char = (trail + lead).decode("utf-8")
        except UnicodeDecodeError:
            continue
        k = (classes.of(char, False), classes.of(extra, False))
        if distinct is not None:
            k = (*k, distinct(char + extra))
        if len(found.get(k, ())) < WITNESSES:
            found.setdefault(k, []).append(
                Completion(char + extra, lead + extra.encode(), (other,))
            )
    return found


def _byte_strings(n: int) -> list[bytes]:
    r"""Continuation-byte strings of length ``n`` to try: all of one or two bytes, else 4 last.

    A two-byte completion may be the only one BPE leaves alone (Qwen3's ``"\xe2" "\x92\x8c"``).
    """
    if n == 1:
        return [bytes([x]) for x in _CONT]
    if n == 2:
        return [bytes([x, y]) for x in _CONT for y in _CONT]
    return [bytes([x, y, z]) for x in _CONT for y in _CONT for z in (0x80, 0x8F, 0xA0, 0xBF)]


def _first(rest: bytes, byte_ids: dict[bytes, int], bad: Any) -> int | None:
    """The longest token starting ``rest`` that may follow (the first `_spell` tries)."""
    for end in range(len(rest), 0, -1):
        t = byte_ids.get(rest[:end])
        if t is not None and not bad[t]:
            return t
    return None


def _spell(
    token: int, rest: bytes, byte_ids: dict[bytes, int], pairs: Any
) -> tuple[int, ...] | None:
    """A tokenization of ``rest`` whose pairs (starting with ``token``) BPE leaves alone."""

    def search(prev: int, pos: int) -> tuple[int, ...] | None:
        if pos == len(rest):
            return ()
        bad = pairs.invalid_after(prev)
        for end in range(len(rest), pos, -1):
            t = byte_ids.get(rest[pos:end])
            if t is not None and not bad[t]:
                tail = search(t, end)
                if tail is not None:
                    return (t, *tail)
        return None

    return search(token, 0)


def byte_ids_of(byte_vocab: list[bytes], excluded: Any) -> dict[bytes, int]:
    """Bytes -> token id for the tokens made only of continuation bytes."""
    out = {}
    for i, b in enumerate(byte_vocab):
        if b and i not in excluded and all(0x80 <= x <= 0xBF for x in b):
            out.setdefault(bytes(b), i)
    return out

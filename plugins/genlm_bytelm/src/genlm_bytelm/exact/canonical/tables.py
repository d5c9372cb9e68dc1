"""Pre-token structures of a pending text followed by a token, cached by class strings.

A [`Structure`][] says where the pending text's boundaries fall before a token, and the
token then closes its pre-token or straddles into the next (docs/bytes-design.md, *How the
filter computes it*). Pending texts that split alike share one table.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "PendingTable",
    "Structure",
    "Tables",
    "TokenClassStrings",
    "any_bit",
    "bitset_words",
    "settled_offset",
]

#: ``(cuts inside the pending text, as offsets from its end; boundary before the token)``.
Structure = tuple[tuple[int, ...], bool]


class TokenClassStrings:
    """The distinct class strings of tokens (and of completed tokens), numbered."""

    def __init__(self) -> None:
        self.strings: list[tuple[int, ...]] = []
        self.ids: dict[tuple[int, ...], int] = {}

    def id(self, classes: tuple[int, ...]) -> int:
        """The number of a class string (new ones are appended)."""
        k = self.ids.get(classes)
        if k is None:
            k = self.ids[classes] = len(self.strings)
            self.strings.append(classes)
        return k

    def __len__(self) -> int:
        return len(self.strings)


def futures(pretok: Any) -> list[str]:
    r"""Futures that decide boundaries already read: the end, one and two characters."""
    cached = getattr(pretok, "_futures", None)
    if cached is None or cached[0] != len(pretok.classes.reps):
        reps = pretok.classes.reps
        firsts = _lookahead_classes(pretok)
        out = ["", *reps, *(reps[k] + b for k in firsts for b in reps)]
        pretok._futures = cached = (len(reps), out)
    return cached[1]


def all_futures(pretok: Any, length: int) -> list[str]:
    """The end of the text and every string of class representatives up to ``length``."""
    key = f"_all_futures_{length}"
    cached = getattr(pretok, key, None)
    if cached is None or cached[0] != len(pretok.classes.reps):
        reps = pretok.classes.reps
        out, level = [""], [""]
        for _ in range(length):
            level = [f + r for f in level for r in reps]
            out += level
        cached = (len(reps), out)
        setattr(pretok, key, cached)
    return cached[1]


def _lookahead_classes(pretok: Any) -> list[int]:
    """Classes after which the next character can move boundaries already read."""
    reps = pretok.classes.reps
    probes = [
        "",
        *reps,
        *(a + b for a in reps for b in reps),
        *(r * n for r in reps for n in (3, 4)),
    ]
    out = []
    for k, c in enumerate(reps):
        for x in probes:
            n = len(x)
            seen = {tuple(b for b in pretok.boundaries(x + c + y) if b <= n) for y in ("", *reps)}
            if len(seen) > 1:
                out.append(k)
                break
    return out


class PendingTable:
    """Structures of one pending state (``empty``: the empty text's table, for lone tokens)."""

    def __init__(
        self,
        pretok: Any,
        pending: tuple[int, ...],
        strings: TokenClassStrings,
        empty: PendingTable | None = None,
    ) -> None:
        self.pretok = pretok
        self.prefix = pretok.classes.text(pending)
        self.strings = strings
        self.empty = empty
        self.structures: list[Structure] = []
        self._ids: dict[Structure, int] = {}
        self._close: dict[int, int] = {}  # class string -> bitmask of closing structures
        self._straddle: dict[int, tuple[tuple[int, int], ...]] = {}  # -> (structure, class)
        self._array: np.ndarray | None = None
        self._straddle_array: np.ndarray | None = None
        self._lone: dict[int, tuple[tuple[int, ...], bool]] = {}
        if empty is not None:
            self._lone = self._lone_classes()

    def _structure(self, structure: Structure) -> int:
        k = self._ids.get(structure)
        if k is None:
            k = self._ids[structure] = len(self.structures)
            self.structures.append(structure)
        return k

    def _lone_classes(self) -> dict[int, tuple[tuple[int, ...], bool]]:
        """First classes after which the pending text always ends a pre-token, with its cuts."""
        classes = self.pretok.classes
        p = len(self.prefix)
        out = {}
        for k, rep in enumerate(classes.reps):
            seen = set()
            for f in all_futures(self.pretok, 2):
                cuts = self.pretok.boundaries(self.prefix + rep + f)
                seen.add((tuple(b - p for b in cuts if 0 < b < p), p in cuts))
                if len(seen) > 1:
                    break
            if len(seen) == 1:
                (structure,) = seen
                if structure[1]:
                    out[k] = structure
        return out

    def close(self, cs: int) -> int:
        """Bitmask (over [`structures`][]) of the structures where ``cs`` closes."""
        if cs not in self._close:
            self._compute(cs)
        return self._close[cs]

    def straddle(self, cs: int) -> tuple[tuple[int, int], ...]:
        """``(structure, next class)`` pairs where ``cs``'s pre-token goes on."""
        if cs not in self._close:
            self._compute(cs)
        return self._straddle[cs]

    def close_array(self) -> np.ndarray:
        """[`close`][] of every token class string, as [`bitset_words`][] rows."""
        n = len(self.strings)
        if self._array is None or self._array.shape[1] != n:
            for cs in range(n):
                self.close(cs)
            self._array = bitset_words([self._close[cs] for cs in range(n)], len(self.structures))
        return self._array

    def straddle_array(self) -> np.ndarray:
        """Bitsets (over [`structures`][]) of the straddling structures of every class string."""
        n = len(self.strings)
        if self._straddle_array is None or self._straddle_array.shape[1] != n:
            self.close_array()
            masks = [sum(1 << k for k in {k for k, _ in self._straddle[cs]}) for cs in range(n)]
            self._straddle_array = bitset_words(masks, len(self.structures))
        return self._straddle_array

    def _compute(self, cs: int) -> None:
        string = self.strings.strings[cs]
        lone = self._lone.get(string[0]) if string else None
        if lone is not None and self.empty is not None:
            # the pending text ends a pre-token whatever this token is: fresh start
            bits = self.empty.close(cs)
            k = self._structure(lone)
            self._close[cs] = (1 << k) if bits else 0
            self._straddle[cs] = tuple((k, c) for _, c in self.empty.straddle(cs))
            self._array = self._straddle_array = None
            return
        classes = self.pretok.classes
        token = classes.text(string)
        p, t = len(self.prefix), len(token)
        close, straddle = 0, set()
        for f in futures(self.pretok):
            cuts = self.pretok.boundaries(self.prefix + token + f)
            if any(p < b < p + t for b in cuts):
                continue  # a boundary inside the token
            k = self._structure((tuple(b - p for b in cuts if 0 < b < p), p == 0 or p in cuts))
            if not f or p + t in cuts:
                close |= 1 << k
            else:
                straddle.add((k, classes.of(f[0])))
        self._close[cs] = close
        self._straddle[cs] = tuple(sorted(straddle))
        self._array = self._straddle_array = None


def bitset_words(masks: list[int], size: int) -> np.ndarray:
    """Bitsets of ``size`` bits (Python ints) as a ``(words, len(masks))`` uint64 array."""
    words = max(1, -(-size // 64))
    out = np.empty((words, len(masks)), dtype=np.uint64)
    for w in range(words):
        out[w] = np.fromiter(
            ((m >> (64 * w)) & _WORD for m in masks), dtype=np.uint64, count=len(masks)
        )
    return out


def any_bit(words: np.ndarray, mask: int) -> np.ndarray:
    """Per column of ``words`` ([`bitset_words`][]): whether it shares a bit with ``mask``."""
    out = np.zeros(words.shape[1], dtype=bool)
    for w in range(words.shape[0]):
        part = (mask >> (64 * w)) & _WORD
        if part:
            out |= (words[w] & np.uint64(part)) != 0
    return out


_WORD = (1 << 64) - 1


class Tables:
    """The pending-state tables of one pre-tokenizer, shared by texts split alike."""

    def __init__(self, pretok: Any, strings: TokenClassStrings) -> None:
        self.pretok = pretok
        self.strings = strings
        self._by_key: dict[tuple[int, ...], PendingTable] = {}
        self._by_signature: dict[tuple[Any, ...], PendingTable] = {}
        self.empty = PendingTable(pretok, (), strings)
        self._by_key[()] = self.empty

    def of(self, key: tuple[int, ...]) -> PendingTable:
        """The table of the pending class string ``key``."""
        table = self._by_key.get(key)
        if table is None:
            signature = self._signature(key)
            table = self._by_signature.get(signature)
            if table is None:
                table = PendingTable(self.pretok, key, self.strings, self.empty)
                self._by_signature[signature] = table
            self._by_key[key] = table
        return table

    def _signature(self, key: tuple[int, ...]) -> tuple[Any, ...]:
        classes = self.pretok.classes
        text = classes.text(key)
        p = len(text)
        return tuple(
            tuple(b - p for b in self.pretok.boundaries(text + f) if 0 < b)
            for f in all_futures(self.pretok, 3)
        )


def settled_offset(pretok: Any, text: str) -> int:
    """The last offset of ``text`` that is a pre-token boundary whatever follows (or 0)."""
    if not text:
        return 0
    n = len(text)
    common: list[int] | None = None
    for f in all_futures(pretok, 2):
        cuts = [b for b in pretok.boundaries(text + f) if b <= n]
        if common is None:
            common = cuts
            continue
        k = 0
        while k < len(common) and k < len(cuts) and common[k] == cuts[k]:
            k += 1
        common = common[:k]
        if not common:
            return 0
    return common[-1] if common else 0

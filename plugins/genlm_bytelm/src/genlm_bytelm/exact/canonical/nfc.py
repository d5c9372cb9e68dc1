"""Canonicality behind an NFC normalizer (Qwen2, Qwen3): which next tokens keep text NFC.

Decided with *inert* characters, after which nothing composes or reorders
(docs/bytes-design.md, *Qwen2 and Qwen3*); [`NFC`][] keeps only the inert characters on
which ``unicodedata`` and the tokenizer's own normalizer agree.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache
from typing import Any

import numpy as np

from genlm_bytelm.errors import CanonicalityUnsupportedError

__all__ = ["NFC", "NFCRule", "inert_representatives"]

#: Code points checked: planes 0-2 and the used parts of 14-16 (as pretok enumerates).
_CODE_POINTS = [
    *(c for c in range(0x30000) if not 0xD800 <= c < 0xE000),
    *range(0xE0000, 0xE0200),
]


class NFC:
    """NFC as the tokenizer computes it, with the inert characters it agrees on (see module)."""

    def __init__(self, normalizer: Any) -> None:
        self._normalize = normalizer.normalize_str
        self.disagreements = _disagreements(normalizer)
        self._inert: dict[str, bool] = {}

    def is_nfc(self, text: str) -> bool:
        """Whether the tokenizer's normalizer leaves ``text`` unchanged."""
        return self._normalize(text) == text

    def inert(self, ch: str) -> bool:
        """Whether nothing before ``ch`` can compose with, reorder or change it under NFC."""
        hit = self._inert.get(ch)
        if hit is None:
            hit = self._inert[ch] = ch not in self.disagreements and _inert(ch)
        return hit

    def last_segment(self, text: str) -> str:
        """``text`` from its last inert character on (all of it when it has none)."""
        for k in range(len(text) - 1, -1, -1):
            if self.inert(text[k]):
                return text[k:]
        return text

    def completion_key(self, text: str) -> str | None:
        """None for completions that keep any NFC text NFC, else their text (a group of its own)."""
        return None if all(self.inert(ch) for ch in text) else text


@lru_cache(maxsize=1)
def _second_elements() -> frozenset[str]:
    """Characters some primary composition takes as its second element (and Hangul V, T)."""
    out = {chr(c) for c in range(0x1161, 0x1176)} | {chr(c) for c in range(0x11A8, 0x11C3)}
    for c in _CODE_POINTS:
        ch = chr(c)
        decomposition = unicodedata.decomposition(ch)
        if not decomposition or decomposition.startswith("<"):
            continue
        parts = [chr(int(h, 16)) for h in decomposition.split()]
        if len(parts) == 2 and unicodedata.normalize("NFC", "".join(parts)) == ch:
            out.add(parts[1])
    return frozenset(out)


def _inert(ch: str) -> bool:
    """Python's answer: combining class 0, its own NFC, never a composition's second."""
    if unicodedata.combining(ch) or ch in _second_elements():
        return False
    if unicodedata.normalize("NFC", ch) != ch:
        return False
    first = unicodedata.normalize("NFD", ch)[0]
    return not unicodedata.combining(first) and first not in _second_elements()


def _disagreements(normalizer: Any) -> frozenset[str]:
    """Characters on which ``unicodedata`` and the tokenizer's NFC disagree.

    Compared: NFC and NFD of every character, every composition, two reorder probes each.
    """
    from tokenizers.normalizers import NFD

    chars = [chr(c) for c in _CODE_POINTS if chr(c) != "\n"]
    composed = []
    for ch in chars:
        decomposition = unicodedata.decomposition(ch)
        if decomposition and not decomposition.startswith("<"):
            composed.append(unicodedata.normalize("NFD", ch))
    probes = [*chars, *composed]
    probes += [".\u0345" + ch for ch in chars] + ["." + ch + "\u0334" for ch in chars]
    out: set[str] = set()
    for form, normalize in (("NFC", normalizer.normalize_str), ("NFD", NFD().normalize_str)):
        pieces = probes if form == "NFC" else chars
        ours = [unicodedata.normalize(form, p) for p in pieces]
        theirs = normalize("\n".join(pieces)).split("\n")
        if len(theirs) != len(ours):
            raise CanonicalityUnsupportedError(
                f"the tokenizer's {form} normalizer changed line breaks (internal check)"
            )
        for p, a, b in zip(pieces, ours, theirs, strict=True):
            if a != b:
                out.update(p + a + b)
    out.discard(".")
    return frozenset(out)


def inert_representatives(nfc: NFC, classes: Any) -> None:
    """Make every class's representative inert; a class with no inert member raises."""
    missing = [k for k, rep in enumerate(classes.reps) if not nfc.inert(rep)]
    for c in _CODE_POINTS if missing else ():
        ch = chr(c)
        if not nfc.inert(ch):
            continue
        k = classes.of(ch)
        if k in missing:
            classes.reps[k] = ch
            missing.remove(k)
            if not missing:
                break
    if missing:
        raise CanonicalityUnsupportedError(
            f"pre-tokenizer classes {missing} (e.g. {classes.reps[missing[0]]!r}) have no "
            f"character that keeps any NFC text NFC; exact byte probabilities behind an NFC "
            f"normalizer cannot be computed"
        )


class NFCRule:
    """Which tokens (``texts``) and completion entries (``extra``) keep a context's text NFC."""

    def __init__(self, nfc: NFC, texts: list[str | None], extra: list[str]) -> None:
        self._tokens = _Table(nfc, texts)
        self._entries = _Table(nfc, extra)

    def tokens(self, segment: str) -> np.ndarray:
        """Bool per token id: ``segment + text`` is NFC (``segment``: a context's last)."""
        return self._tokens.allowed(segment)

    def entries(self, segment: str) -> np.ndarray:
        """Bool per completion entry: ``segment + text + completion`` is NFC."""
        return self._entries.allowed(segment)


class _Table:
    """``is_nfc(segment + text)`` per text, per segment, cached (inert-first texts once)."""

    #: Segments kept before the cache is emptied.
    CACHE = 4096

    def __init__(self, nfc: NFC, texts: list[str | None]) -> None:
        self.nfc = nfc
        self.texts = texts
        n = len(texts)
        self.base = np.zeros(n, dtype=bool)  # allowed after any inert-ending segment
        dependent = []
        for i, t in enumerate(texts):
            if t is None:
                continue
            if not t or nfc.inert(t[0]):
                self.base[i] = nfc.is_nfc(t)
            else:
                dependent.append(i)
        self.dependent = np.asarray(dependent, dtype=np.int64)
        self._cache: dict[str, np.ndarray] = {}

    def allowed(self, segment: str) -> np.ndarray:
        hit = self._cache.get(segment)
        if hit is None:
            hit = self.base.copy()
            texts, is_nfc = self.texts, self.nfc.is_nfc
            for i in self.dependent.tolist():
                hit[i] = is_nfc(segment + texts[i])
            if len(self._cache) >= self.CACHE:
                self._cache.clear()
            self._cache[segment] = hit
        return hit

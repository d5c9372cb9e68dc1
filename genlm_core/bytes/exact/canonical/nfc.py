"""Canonicality behind an NFC normalizer (Qwen2, Qwen3): which next tokens keep text NFC.

A tokenizer with an NFC normalizer encodes ``x`` as ``enc0(NFC(x))``, ``enc0`` the same
tokenizer without it. NFC is idempotent, so its encodings are ``enc0(y)`` for NFC texts
``y``, and a token string ``t`` is canonical iff it is a prefix of ``enc0(y)`` for some
NFC ``y``. Being NFC is closed under prefixes, so on top of the byte-level BPE rule the
text ``t`` spells must be NFC, and the continuation the BPE rule relies on must exist
among texts that keep it NFC.

Both are decided with *inert* characters: a character ``X`` with canonical combining
class 0 that is its own NFC, that no composition takes as its second element (so it
never composes with what precedes it) and whose decomposition starts likewise. Nothing
before an inert character interacts with it or with what follows it under NFC, so

* ``is_nfc(A + X + B) == is_nfc(A) and is_nfc(X + B)`` for ``X`` inert; a context only
  needs its last *segment* (from its last inert character on, :func:`last_segment`)
  to judge what may follow it;
* appending inert characters to an NFC text keeps it NFC: the futures the pre-token
  tables try (class representatives) are made inert (:func:`inert_representatives`),
  so every future they rely on is realisable by an NFC text.

Python's ``unicodedata`` decides; :func:`check_agreement` holds it to the tokenizer's
own normalizer on every character and every composition when a filter is built.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache
from typing import Any

import numpy as np

from genlm_core.bytes.errors import CanonicalityUnsupportedError

__all__ = ["NFC", "NFCRule", "inert_representatives"]

#: Code points checked: planes 0-2 and the used parts of 14-16 (as pretok enumerates).
_CODE_POINTS = [
    *(c for c in range(0x30000) if not 0xD800 <= c < 0xE000),
    *range(0xE0000, 0xE0200),
]


class NFC:
    """NFC as the tokenizer computes it, with the inert characters it agrees on.

    ``is_nfc`` asks the tokenizer's own normalizer (the reference). ``inert`` is read
    from Python's ``unicodedata`` and kept only for characters where the two agree:
    each character's NFC and NFD, every composition, and a combining class of 0 (two
    probes that a mark of another class would be reordered against). The characters of
    any disagreement (Python 3.11's Unicode 14 composes U+11935 U+11930 into U+11938,
    the tokenizers library does not) are treated as not inert: texts with them are
    checked whole by the normalizer, never reasoned about.

    Args:
        normalizer: The tokenizer's normalizer (``tokenizers.normalizers.NFC``).
    """

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
        """Completions of a split character that keep any NFC text NFC alike share None.

        Whether one with a non-inert character keeps text NFC depends on that
        character, so those are told apart by their text (each its own witness group).
        """
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
    """Characters on which ``unicodedata`` and the tokenizer's NFC disagree (see NFC).

    Compared, one call each way: every character's NFC and NFD, every composition
    (the NFD of each decomposable character, composed), and ``"." + U+0345 + c`` and
    ``"." + c + U+0334`` (a character of a nonzero class in either would be reordered
    against U+0345, class 240, or U+0334, class 1).
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
    """Make every class's representative inert, so the futures tried keep text NFC.

    Raises:
        CanonicalityUnsupportedError: A class has no inert member among planes 0-2: a
            future of that class may break NFC, which the tables cannot see.
    """
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
    """Which tokens keep a context's text NFC, vectorised over the vocabulary.

    Args:
        nfc: The tokenizer's :class:`NFC`.
        texts: Per token id, its text (whole characters) or None (never canonical).
        extra: Per completion entry, its token's text plus the completed characters.
    """

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
    """``is_nfc(segment + text)`` for a list of texts, per segment, cached.

    A text that starts with an inert character (most) does not depend on the segment;
    the others (a combining mark first, a Hangul vowel...) are checked per segment.
    """

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

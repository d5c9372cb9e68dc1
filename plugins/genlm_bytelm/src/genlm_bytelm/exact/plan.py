"""Which contexts reading known bytes will ask the model for, found without the model.

Canonicality does not depend on the model's probabilities, so ``prefill`` lists its
contexts in advance ([`.prefill`][]) and generation asks for those along the predicted
bytes in a forward it needs anyway (speculation).
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np

__all__ = ["Spellings", "can_go_on", "goes_on_longer", "reading"]


class Spellings:
    """Token ids by bytes, for the tokens spelling a text's segments."""

    def __init__(self, byte_vocab: list[bytes], allowed: Any) -> None:
        buckets: dict[bytes, list[tuple[bytes, int]]] = {}  # one sort of all: a 0.25-1 s stall
        for i, b in enumerate(byte_vocab):
            if b and allowed(i):
                buckets.setdefault(b[:2], []).append((bytes(b), i))
        pairs = [pair for key in sorted(buckets) for pair in sorted(buckets[key])]
        self.keys = [b for b, _ in pairs]
        self.ids = [i for _, i in pairs]
        self.id_array = np.asarray(self.ids, dtype=np.int64)
        self.longest = max((len(b) for b in self.keys), default=1)

    def exact(self, data: bytes) -> list[int]:
        """Ids of the tokens whose bytes are ``data``."""
        return self.ids[bisect.bisect_left(self.keys, data) : bisect.bisect_right(self.keys, data)]

    def starts(self, prefix: bytes) -> bool:
        """Whether some token starts with ``prefix`` (or is it)."""
        lo = bisect.bisect_left(self.keys, prefix)
        return lo < len(self.keys) and self.keys[lo].startswith(prefix)

    def longer(self, prefix: bytes) -> tuple[int, int]:
        """Where the tokens that start with ``prefix`` and are longer lie: ``ids[lo:hi]``.

        Two bisections (no walk over them: a prefix such as ``b" "`` starts ~20k tokens).
        """
        lo = bisect.bisect_right(self.keys, prefix)
        above = prefix.rstrip(b"\xff")  # the first byte string after every prefix + more
        if not above:
            return lo, len(self.keys)
        above = above[:-1] + bytes([above[-1] + 1])
        return lo, bisect.bisect_left(self.keys, above, lo)


def can_go_on(canon: Any, pending: Any, rest: bytes, spell: Spellings, checks=32) -> bool:
    """Whether some canonical next token after ``pending`` agrees with the bytes ``rest``."""
    for stop in range(1, min(len(rest), spell.longest) + 1):
        if not spell.starts(rest[:stop]):
            return False
        for token in spell.exact(rest[:stop]):
            if canon.valid_next(pending, token):
                return True
    return len(rest) < spell.longest and goes_on_longer(canon, pending, rest, spell, checks)


def goes_on_longer(canon: Any, pending: Any, spelled: bytes, spell: Spellings, checks=32) -> bool:
    """Whether a canonical next token after ``pending`` spells ``spelled`` and more."""
    lo, hi = spell.longer(spelled)
    if hi - lo > checks:  # one mask beats many checks, once its tables are built
        return bool(canon.mask(pending)[spell.id_array[lo:hi]].any())
    return any(canon.valid_next(pending, t) for t in spell.ids[lo:hi])


def reading(origins: list[tuple[Any, bytes]], text: bytes, spell: Spellings) -> list[Any]:
    """The contexts reading ``text`` byte by byte will ask for, in order (speculation)."""
    out = []
    alive = [(lm_state, -len(partial), partial) for lm_state, partial in origins]
    for k in range(1, len(text) + 1):
        born = []
        kept = []
        for lm_state, start, partial in alive:
            spelled = partial + text[max(start, 0) : k]
            canon, pending = lm_state.canon, lm_state.pending
            ends = [t for t in spell.exact(spelled) if canon.valid_next(pending, t)]
            for t in ends:
                child = lm_state << t
                out.append(child)
                born.append((child, k, b""))
            if goes_on_longer(canon, pending, spelled, spell):
                kept.append((lm_state, start, partial))
        alive = kept + born
    return out

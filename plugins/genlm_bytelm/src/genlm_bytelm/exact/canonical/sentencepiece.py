"""Canonical next tokens of SentencePiece-style BPE (Llama-2, Mistral v0.1, Gemma 3).

A token string is canonical when its pieces are derivable and pairwise left alone by the
merges, byte-token runs spell whole characters that are no piece, and (with a dummy
prefix) the first piece starts with ``▁`` (docs/bytes-design.md, *SentencePiece families*).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, NamedTuple

import numpy as np

from genlm_bytelm.errors import CanonicalityUnsupportedError
from genlm_bytelm.exact.canonical.pending import Pending
from genlm_bytelm.exact.canonical.sentencepiece_pairs import CharPairs
from genlm_bytelm.exact.canonical.sentencepiece_spec import (
    SPACE,
    excluded_added,
    read_sentencepiece_spec,
)
from genlm_bytelm.exact.canonical.tokens import utf8_length

__all__ = ["SentencePieceFilter", "SPPending"]


class SPPending(NamedTuple):
    """A context's last token (-1: none) and the bytes of a byte-token run's open character."""

    last: int
    run: bytes


START = SPPending(-1, b"")
#: Masks kept (by last token and open run) before the cache is emptied: 256 x 262k
#: booleans is 67 MB for Gemma 3.
MASKS_KEPT = 256


class SentencePieceFilter:
    """Canonical next tokens of a SentencePiece-style BPE (see module doc).

    The interface of [`CanonicalFilter`][.filter.CanonicalFilter] that ``ExactByteState`` uses.

    Raises:
        CanonicalityUnsupportedError: Not a recognised family, or the vocabulary's bytes
            are not what its pieces spell.
    """

    def __init__(self, tokenizer: Any, byte_vocab: list[Any]) -> None:
        self.spec = spec = read_sentencepiece_spec(tokenizer)
        self.byte_vocab = [bytes(t) for t in byte_vocab]
        self.n = n = len(self.byte_vocab)
        self.excluded = excluded = frozenset(i for i in excluded_added(spec) if i < n)
        try:
            self.pairs = pairs = CharPairs(spec, n, excluded)
        except ValueError as e:
            raise CanonicalityUnsupportedError(
                f"ExactByteState cannot compute canonical tokenizations for {spec.name}: {e}"
            ) from e
        self.byte_of = pairs.byte_of
        self._check_bytes()
        strings = pairs.strings
        self.piece_ok = np.zeros(n, dtype=bool)
        self.starts_space = np.zeros(n, dtype=bool)
        for i, s in strings.items():
            if pairs.derivable[i] and self.byte_of[i] < 0 and " " not in s:
                self.piece_ok[i] = True
            self.starts_space[i] = s.startswith(SPACE)
        self.byte_token = np.full(256, -1, dtype=np.int64)
        for i in np.flatnonzero(self.byte_of >= 0).tolist():
            self.byte_token[self.byte_of[i]] = i
        if (self.byte_token < 0).any():
            raise CanonicalityUnsupportedError(
                f"{spec.name}: byte fallback lacks the pieces of bytes "
                f"{np.flatnonzero(self.byte_token < 0).tolist()}"
            )
        # characters a byte run may not spell: pieces, and the space N never holds
        self._covered = set(pairs.char_id) | {" "}
        self._covered_prefixes = Counter(
            ch.encode()[:k] for ch in self._covered for k in range(1, len(ch.encode()))
        )
        self._runs: dict[bytes, np.ndarray] = {}
        usable = self._run_bytes(b"").copy()
        usable[0x80:0xC0] = True  # continuation bytes (checked against the run when read)
        self.texts: list[str | None] = [
            strings.get(i)
            if self.piece_ok[i] or (self.byte_of[i] >= 0 and usable[self.byte_of[i]])
            else None
            for i in range(n)
        ]
        self._masks: dict[SPPending, np.ndarray] = {}

    def _check_bytes(self) -> None:
        """``llm.byte_vocab`` must spell each piece as its text with ``▁`` as a space."""
        for i, s in self.pairs.strings.items():
            if i in self.excluded:
                continue
            want = (
                bytes([self.byte_of[i]]) if self.byte_of[i] >= 0 else s.replace(SPACE, " ").encode()
            )
            if self.byte_vocab[i] != want:
                raise CanonicalityUnsupportedError(
                    f"{self.spec.name}: token {i} ({s!r}) spells {self.byte_vocab[i]!r} in the "
                    f"model's byte vocabulary, not {want!r}"
                )

    def _run_bytes(self, run: bytes) -> np.ndarray:
        """Over the 256 bytes: which may follow ``run`` inside a byte-fallback run."""
        hit = self._runs.get(run)
        if hit is None:
            hit = np.zeros(256, dtype=bool)
            for b in range(256):
                q = run + bytes([b])
                size = utf8_length(q[0])
                if size == 0:
                    continue
                if len(q) == size:
                    try:
                        hit[b] = q.decode("utf-8") not in self._covered
                    except UnicodeDecodeError:
                        pass
                else:
                    hit[b] = _valid_count(q) > self._covered_prefixes.get(q, 0)
            hit.flags.writeable = False
            self._runs[run] = hit
        return hit

    @staticmethod
    def _state(pending: Any) -> SPPending:
        if isinstance(pending, SPPending):
            return pending
        if isinstance(pending, Pending) and not pending.ids and not pending.data:
            return START  # the shared EMPTY of a fresh context
        raise TypeError(f"not a SentencePiece filter state: {pending!r}")

    def extend(self, pending: Any, token: int) -> SPPending:
        """The state after ``token`` (assumed canonical next)."""
        state = self._state(pending)
        byte = int(self.byte_of[token])
        if byte >= 0:
            run = state.run + bytes([byte])  # a character completed closes the run
            return SPPending(int(token), b"" if len(run) == utf8_length(run[0]) else run)
        return SPPending(int(token), b"")

    def mask(self, pending: Any) -> np.ndarray:
        """Boolean vector over token ids: ``context + [d]`` is canonical."""
        state = self._state(pending)
        hit = self._masks.get(state)
        if hit is not None:
            return hit
        out = np.zeros(self.n, dtype=bool)
        if not state.run:
            out |= self.piece_ok
            if state.last >= 0 and self.byte_of[state.last] < 0:
                out &= ~self.pairs.invalid_after(state.last)
        allowed = self._run_bytes(state.run)
        out[self.byte_token[allowed]] = True
        if state.last < 0 and self.spec.dummy_prefix:
            out &= self.starts_space
        out.flags.writeable = False
        if len(self._masks) > MASKS_KEPT:
            self._masks.clear()
        self._masks[state] = out
        return out

    def valid_next(self, pending: Any, token: int) -> bool:
        """Whether ``context + [token]`` is canonical (one token; the rules of [`mask`][])."""
        state = self._state(pending)
        token = int(token)
        if state.last < 0 and self.spec.dummy_prefix and not self.starts_space[token]:
            return False
        byte = int(self.byte_of[token])
        if byte >= 0:
            return bool(self._run_bytes(state.run)[byte])
        if state.run or not self.piece_ok[token]:
            return False
        if state.last >= 0 and self.byte_of[state.last] < 0:
            return not self.pairs.pair_invalid(state.last, token)
        return True

    def complete(self, pending: Any) -> bool:
        """Whether the context is the encoding of its text (no character left open)."""
        return not self._state(pending).run

    def warm(self, length: int = 4) -> int:
        """Nothing to build ahead (kept for `CanonicalFilter`'s interface)."""
        return 0


def _valid_count(prefix: bytes) -> int:
    """How many Unicode scalar values' UTF-8 encodings start with ``prefix`` (a proper one)."""
    size = utf8_length(prefix[0])
    lo, hi = {0xE0: (0xA0, 0xBF), 0xED: (0x80, 0x9F), 0xF0: (0x90, 0xBF), 0xF4: (0x80, 0x8F)}.get(
        prefix[0], (0x80, 0xBF)
    )
    if len(prefix) == 1:
        return (hi - lo + 1) * 64 ** (size - 2)
    if not lo <= prefix[1] <= hi or any(not 0x80 <= b <= 0xBF for b in prefix[2:]):
        return 0
    return 64 ** (size - len(prefix))

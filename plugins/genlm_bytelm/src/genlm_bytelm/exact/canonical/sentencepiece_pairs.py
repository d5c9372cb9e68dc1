"""BPE pair tests over characters, for SentencePiece-style BPE with byte fallback.

The pair rule of [`BPEPairs`][.bpe.BPEPairs] holds with characters as the base symbols (a
character that is no piece is byte tokens, which no merge touches); [`CharPairs`][]
derives each piece from its characters, checked against the tokenizer's ``model.tokenize``.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any

import numpy as np

from genlm_bytelm.exact.canonical.bpe import BPEPairs, _bpe, merge_ranks

__all__ = ["BYTE_PIECE", "CharPairs"]

#: A byte-fallback piece: ``<0xE2>``.
BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


class CharPairs(BPEPairs):
    """Merges of a SentencePiece-style BPE over characters (``excluded`` ids stay underivable)."""

    def __init__(self, spec: Any, n: int, excluded: frozenset[int], cache_size: int = 256) -> None:
        self.n = n
        self.ignore_merges = False
        ids = spec.vocab
        self.strings = {i: s for s, i in ids.items() if i < n}
        self.ranks = merge_ranks(spec.merges, ids)
        self.byte_of = np.full(n, -1, dtype=np.int64)  # byte-fallback pieces: their byte
        for s, i in ids.items():
            m = BYTE_PIECE.fullmatch(s)
            if m and i < n and i not in excluded:
                self.byte_of[i] = int(m.group(1), 16)
        touched = {t for pair in self.ranks for t in pair} | {r for _, r in self.ranks.values()}
        if any(self.byte_of[t] >= 0 for t in touched if t < n):
            raise ValueError(f"{spec.name}: a merge involves a byte-fallback piece")
        self.char_id = {s: i for s, i in ids.items() if len(s) == 1 and i < n and i not in excluded}
        self.left = np.full(n, -1, dtype=np.int64)
        self.right = np.full(n, -1, dtype=np.int64)
        self.rank = np.full(n, -1, dtype=np.int64)
        self.derivable = np.zeros(n, dtype=bool)
        self._derive_chars(spec, excluded)
        self._index()
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._spines = {}
        self.underivable_bytes = {}
        self._full = self._merges_only = spec.backend.model

    def _derive_chars(self, spec: Any, excluded: frozenset[int]) -> None:
        """Which pieces merges rebuild from their characters, and the last merge that does."""
        model = spec.backend.model
        makers: dict[int, list[tuple[int, int, int]]] = {}
        for (u, v), (rank, result) in self.ranks.items():
            makers.setdefault(result, []).append((u, v, rank))
        for s, tid in spec.vocab.items():
            if tid >= self.n or tid in excluded:
                continue
            if self.byte_of[tid] >= 0:
                self.derivable[tid] = True  # a base symbol
                continue
            if [t.id for t in model.tokenize(s)] != [tid]:
                continue
            self.derivable[tid] = True
            if len(s) == 1:
                continue  # a base symbol
            made = makers.get(tid, [])
            if len(made) == 1:
                self.left[tid], self.right[tid], self.rank[tid] = made[0]
                continue
            final, last = (
                _bpe([self.char_id[ch] for ch in s], self.ranks)
                if all(ch in self.char_id for ch in s)
                else ([], None)
            )
            if final != [tid] or last is None:
                raise ValueError(
                    f"{spec.name}: piece {s!r} ({tid}) is its own BPE, but the character "
                    f"derivation gives {final}"
                )
            self.left[tid], self.right[tid], self.rank[tid] = last

    def closed_group(self, ids: list[int]) -> bool:
        """Whether the tokenizer's BPE of the text of ``ids`` (one word) is ``ids``."""
        text = "".join(self.strings[i] for i in ids)
        if any(self.byte_of[i] >= 0 for i in ids):
            raise ValueError("closed_group: byte pieces have no text of their own")
        return [t.id for t in self._full.tokenize(text)] == list(ids)

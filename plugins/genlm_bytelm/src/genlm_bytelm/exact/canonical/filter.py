"""``CanonicalFilter``: which tokens may come next in a canonical byte-level BPE token string.

It checks pre-token boundaries ([`.tables`][]), BPE inside pre-tokens ([`.bpe`][]),
characters split between tokens ([`.tokens`][]) and, behind an NFC normalizer,
NFC-ness ([`.nfc`][]); docs/bytes-design.md, *How the filter computes it*.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from genlm_bytelm.exact.canonical.bpe import BPEPairs
from genlm_bytelm.exact.canonical.limits import straddle_depth
from genlm_bytelm.exact.canonical.nfc import NFC, NFCRule, inert_representatives
from genlm_bytelm.exact.canonical.pending import EMPTY, Pending, missing_bytes
from genlm_bytelm.exact.canonical.pretok import PROBE_CHARS, Pretokenizer, verification_texts
from genlm_bytelm.exact.canonical.spec import read_spec
from genlm_bytelm.exact.canonical.tables import (
    PendingTable,
    Tables,
    TokenClassStrings,
    any_bit,
    settled_offset,
)
from genlm_bytelm.exact.canonical.tokens import (
    LEAD,
    TEXT,
    TRAIL,
    byte_ids_of,
    completions,
    split_utf8,
)

__all__ = ["EMPTY", "CanonicalFilter", "Pending"]

#: Entries kept in the per-context caches before they are emptied.
CACHE_ENTRIES = 200_000
#: Masks kept (a vocabulary's bools each): reading ahead asks for one context's mask once
#: per predicted byte, and materializing the context asks again (benchmarks/bench_bytes.py).
MASKS_KEPT = 64


class CanonicalFilter:
    """Canonical next tokens of a byte-level BPE tokenizer (see module doc).

    Build one per tokenizer (seconds: it runs BPE on every token) and share it.

    Raises:
        CanonicalityUnsupportedError: The tokenizer is not one this covers.
    """

    def __init__(self, tokenizer: Any, byte_vocab: list[Any]) -> None:
        self.spec = read_spec(tokenizer)
        #: Behind an NFC normalizer: NFC as the tokenizer computes it (else None).
        self.nfc = NFC(self.spec.backend.normalizer) if self.spec.normalizer == "NFC" else None
        self.byte_vocab = [bytes(t) for t in byte_vocab]
        self.n = len(self.byte_vocab)
        self.pretok = Pretokenizer(self.spec.splits)
        self.pairs = BPEPairs(self.spec, self.byte_vocab)
        self.classes = self.pretok.classes
        self.strings = TokenClassStrings()
        self._analyse_tokens()
        self.pretok.verify(self.spec.backend, verification_texts(self.texts, self.classes.reps))
        #: How many tokens ahead a pre-token that must go on is followed (exact: see
        #: [`.limits`][]).
        self.max_depth = straddle_depth(self.spec, self.pairs, self.pretok, self.texts)
        self.tables = Tables(self.pretok, self.strings)
        self._settled: dict[tuple[int, ...], int] = {}
        self._groups: dict[tuple[tuple[int, ...], Any], tuple[bool, tuple[int, ...]]] = {}
        self._next_cache: dict[tuple[tuple[int, ...], bytes, str], bool] = {}
        self._masks: dict[tuple[tuple[int, ...], bytes, str], np.ndarray] = {}

    def _analyse_tokens(self) -> None:
        n, classes, reach = self.n, self.classes, self.classes.reach
        excluded = set(self.spec.added_ids) | {i for i in range(n) if i not in self.pairs.strings}
        self.texts = [
            None if i in excluded or not b else split_utf8(b) for i, b in enumerate(self.byte_vocab)
        ]
        for ch in PROBE_CHARS:
            classes.of(ch)
        classes.enumerate_all()
        if self.nfc:
            inert_representatives(self.nfc, classes)
        self.normal = np.zeros(n, dtype=bool)
        self.cs = np.zeros(n, dtype=np.int64)
        for i, t in enumerate(self.texts):
            if t is not None and not t[LEAD] and not t[TRAIL]:
                self.normal[i] = True
                self.cs[i] = self.strings.id(classes.string(t[TEXT], head=reach))
            elif t is not None:
                for ch in t[TEXT]:
                    classes.of(ch)
        self.normal_ids = np.flatnonzero(self.normal)
        self.normal_cs = self.cs[self.normal_ids]
        if self.spec.ignore_merges:
            self.alone = np.ones(n, dtype=bool)
        else:
            self.alone = self.pairs.derivable.copy()
        self.token_id = {b: i for i, b in enumerate(self.byte_vocab) if self.normal[i]}
        # tokens that end inside a character, with the ways to complete it
        byte_ids = byte_ids_of(self.byte_vocab, excluded)
        mixed: dict[int, list[tuple[int, bytes, str]]] = {}
        for i, t in enumerate(self.texts):
            if t is not None and t[LEAD] and len(t[TEXT]) == 1 and not t[TRAIL]:
                mixed.setdefault(len(t[LEAD]), []).append((i, t[LEAD], t[TEXT]))
        # per token: (completed text, completing tokens) of every witness, plain tuples of
        # str and ints, which the cyclic collector stops tracking (70k on Llama-3)
        self._trail: dict[int, tuple[tuple[str, tuple[int, ...]], ...]] = {}
        entries = []  # (token, class string of its text + completed char, completion, closed)
        # entries alike for the mask (same token, class string, closure, NFC behaviour, and
        # bytes no underivable entry ends with) are kept once; _trail keeps every witness
        hit_bytes = {b[j:] for b in self.pairs.underivable_bytes for j in range(len(b))}
        seen = set()
        for i, t in enumerate(self.texts):
            if t is None or not t[TRAIL]:
                continue
            key = self.nfc.completion_key if self.nfc else None
            found = completions(i, t[TRAIL], byte_ids, self.pairs, classes, mixed, key)
            self._trail[i] = tuple((c.text, c.tokens) for cs in found.values() for c in cs)
            if t[LEAD]:
                continue  # only after a context ending inside a character: handled there
            for comp_list in found.values():
                for comp in comp_list:
                    cs = self.strings.id(classes.string(t[TEXT] + comp.text, head=reach))
                    closed = self.pairs.closed_group([i, *comp.tokens])
                    full = self.byte_vocab[i] + comp.rest
                    alike = (
                        i,
                        cs,
                        closed,
                        key(comp.text) if key else None,
                        full if self.spec.ignore_merges and full in hit_bytes else None,
                    )
                    if alike not in seen:
                        seen.add(alike)
                        entries.append((i, cs, comp, closed))
        self._entry_token = np.asarray([e[0] for e in entries], dtype=np.int64)
        self._entry_cs = np.asarray([e[1] for e in entries], dtype=np.int64)
        self._entry_closed = np.asarray([e[3] for e in entries], dtype=bool)
        self._entry_by_bytes: dict[bytes, list[int]] = {}
        for k, (i, _, comp, _) in enumerate(entries):
            self._entry_by_bytes.setdefault(self.byte_vocab[i] + comp.rest, []).append(k)
        self.lead_ids = [i for i, t in enumerate(self.texts) if t is not None and t[LEAD]]
        self.nfc_rule = None
        if self.nfc:
            self.nfc_rule = NFCRule(
                self.nfc,
                [t[TEXT] if self.normal[i] else None for i, t in enumerate(self.texts)],
                [self.texts[i][TEXT] + e.text for i, _, e, _ in entries],
            )

    def extend(self, pending: Pending, token: int) -> Pending:
        """The pending part of ``context + [token]``, settled as far as it can be."""
        ids = (*pending.ids, int(token))
        data = pending.data + self.byte_vocab[token]
        new = Pending(ids, data, self.byte_vocab)
        if self.nfc:
            new.segment = self.nfc.last_segment(pending.segment + new.text[len(pending.text) :])
        if new.partial or not new.text:
            return new
        offset = self._settle(new.text)
        if offset <= 0:
            return new
        for k, end in enumerate(new.ends):
            if end == offset:
                rest = ids[k + 1 :]
                return Pending(
                    rest,
                    data[sum(len(self.byte_vocab[t]) for t in ids[: k + 1]) :],
                    self.byte_vocab,
                    new.segment,
                )
        return new

    def warm(self, length: int = 4) -> int:
        """Build the tables short texts (``length`` characters) reach now; how many there are."""
        seen, frontier = {""}, [""]
        for _ in range(length):
            new = []
            for text in frontier:
                for rep in self.classes.reps:
                    grown = text + rep
                    rest = grown[self._settle(grown) :]
                    if rest not in seen:
                        seen.add(rest)
                        new.append(rest)
            frontier = new
        tables = {id(self.table(Pending((), t.encode(), []))): t for t in seen}
        for text in tables.values():
            table = self.table(Pending((), text.encode(), []))
            table.close_array()
            table.straddle_array()
        return len(tables)

    def _settle(self, text: str) -> int:
        key = self.classes.string(text)
        hit = self._settled.get(key)
        if hit is None:
            hit = self._settled[key] = settled_offset(self.pretok, self.classes.text(key))
        return hit

    def table(self, pending: Pending) -> PendingTable:
        """The structure table of a pending text (complete characters only)."""
        return self.tables.of(self.classes.string(pending.text))

    def _group_ok(self, pending: Pending, structure: Any) -> tuple[bool, tuple[int, ...]]:
        """Whether the pending tokens fit ``structure``; the open group's tokens if any."""
        key = (pending.ids, structure)
        hit = self._groups.get(key)
        if hit is not None:
            return hit
        n = len(pending.text)
        cuts, joined = tuple(n + c for c in structure[0]), structure[1]
        out: tuple[bool, tuple[int, ...]] = (False, ())
        if set(cuts) <= {e for e in pending.ends if e is not None}:
            closed_ok, current = self._close_groups(pending, (*cuts, n) if joined else cuts)
            if joined:
                out = (closed_ok and not current, ())
            else:
                out = (
                    closed_ok and bool(current) and self.pairs.merges_only(current),
                    tuple(current),
                )
        if len(self._groups) > CACHE_ENTRIES:  # bounded: pending parts only repeat locally
            self._groups.clear()
        self._groups[key] = out
        return out

    def mask(self, pending: Pending) -> np.ndarray:
        """Boolean vector over token ids: ``context + [d]`` is canonical (read-only, shared)."""
        key = (pending.ids, pending.data, pending.segment)  # all a mask depends on
        out = self._masks.get(key)
        if out is None:
            out = self._mask(pending, 0)
            out.flags.writeable = False
            if len(self._masks) >= MASKS_KEPT:
                self._masks.clear()
            self._masks[key] = out
        return out

    def _mask(self, pending: Pending, depth: int) -> np.ndarray:
        if pending.partial:
            out = np.zeros(self.n, dtype=bool)
            for d in self.lead_ids:
                out[d] = self._valid(pending, d, depth)
            return out
        out, maybe, table = self._closing(pending)
        for d in maybe:
            if self._straddles(pending, table, d, depth):
                out[d] = True
        return out

    def _closing(self, pending: Pending) -> tuple[np.ndarray, list[int], PendingTable]:
        """Tokens canonical with their pre-token ending; the tokens whose must go on."""
        out = np.zeros(self.n, dtype=bool)
        table = self.table(pending)
        bits = table.close_array()
        tok_bits = bits[:, self.normal_cs]
        ent_bits = bits[:, self._entry_cs]
        good_joined = 0  # bitsets over table.structures (any number of them)
        opens = []
        for k, structure in enumerate(table.structures):
            ok, tail = self._group_ok(pending, structure)
            if ok and structure[1]:
                good_joined |= 1 << k
            elif ok:
                opens.append((1 << k, tail))
        ids = self.normal_ids
        valid = any_bit(tok_bits, good_joined) & self.alone[ids]
        ent_valid = any_bit(ent_bits, good_joined) & self._entry_closed
        bad = self.pairs.invalid_after(pending.ids[-1]) if pending.ids else None
        good_open = 0
        for bit, tail in opens:
            good_open |= bit
            tail_bytes = b"".join(self.byte_vocab[t] for t in tail)
            hit, ent_hit = self._underivable(tail_bytes)
            valid |= any_bit(tok_bits, bit) & ~bad[ids] & ~hit[ids]
            ent_valid |= any_bit(ent_bits, bit) & ~bad[self._entry_token] & ~ent_hit
        keeps_nfc = None
        if self.nfc_rule is not None:
            keeps_nfc = self.nfc_rule.tokens(pending.segment)[ids]
            valid &= keeps_nfc
            ent_valid &= self.nfc_rule.entries(pending.segment)
        out[ids] = valid
        if len(self._entry_token):
            np.logical_or.at(out, self._entry_token, ent_valid)
        # tokens whose pre-token must go on into a next token (no closing future fits)
        straddle = table.straddle_array()[:, self.normal_cs]
        maybe = ~valid & any_bit(straddle, good_joined) & self.pairs.derivable[ids]
        if bad is not None:
            maybe |= ~valid & any_bit(straddle, good_open) & ~bad[ids]
        if keeps_nfc is not None:
            maybe &= keeps_nfc
        return out, ids[maybe].tolist(), table

    def _straddles(self, pending: Pending, table: PendingTable, token: int, depth: int) -> bool:
        """Canonical with ``token``'s pre-token continuing into a next token."""
        if depth >= self.max_depth:
            return False  # deeper than any chain of forced contexts (see .limits)
        for k, _ in table.straddle(int(self.cs[token])):
            structure = table.structures[k]
            ok, tail = self._group_ok(pending, structure)
            if not ok:
                continue
            if structure[1]:
                if not self.pairs.derivable[token]:
                    continue
            elif self.pairs.pair_invalid(tail[-1], token):
                continue
            return self._has_next(self.extend(pending, token), depth + 1)
        return False

    def _has_next(self, pending: Pending, depth: int) -> bool:
        """Whether some token can follow; only a *forced* context searches deeper (see .limits)."""
        key = (pending.ids, pending.data, pending.segment)
        hit = self._next_cache.get(key)
        if hit is None:
            if pending.partial:
                hit = any(self._valid(pending, d, depth) for d in self.lead_ids)
            else:
                out, maybe, table = self._closing(pending)
                hit = bool(out.any()) or any(
                    self._straddles(pending, table, d, depth) for d in maybe
                )
            if len(self._next_cache) > CACHE_ENTRIES:
                self._next_cache.clear()
            self._next_cache[key] = hit
        return hit

    def _underivable(self, tail: bytes) -> tuple[np.ndarray, np.ndarray]:
        """Tokens / completion entries that would close ``tail`` into an underivable token."""
        hit = np.zeros(self.n, dtype=bool)
        ent_hit = np.zeros(len(self._entry_token), dtype=bool)
        if self.spec.ignore_merges:
            for rest in self.pairs.underivable_after(tail).values():
                t = self.token_id.get(rest)
                if t is not None:
                    hit[t] = True
                for k in self._entry_by_bytes.get(rest, ()):
                    ent_hit[k] = True
        return hit, ent_hit

    def valid_next(self, pending: Pending, token: int) -> bool:
        """Whether ``context + [token]`` is canonical (one token; same rules as [`mask`][])."""
        return self._valid(pending, token, 0)

    def _valid(self, pending: Pending, token: int, depth: int) -> bool:
        t = self.texts[token]
        if t is None:
            return False
        if pending.partial:
            return self._after_partial(pending, token, t)
        if t[LEAD]:
            return False
        if not t[TRAIL]:
            if self.nfc and not self.nfc.is_nfc(pending.segment + t[TEXT]):
                return False
            if self._fits(pending, token, t[TEXT], (token,), bool(self.alone[token])):
                return True
            table = self.table(pending)
            return bool(table.straddle(int(self.cs[token]))) and self._straddles(
                pending, table, token, depth
            )
        for extra, comp_tokens in self._trail.get(token, ()):
            if self.nfc and not self.nfc.is_nfc(pending.segment + t[TEXT] + extra):
                continue
            closed = self.pairs.closed_group([token, *comp_tokens])
            if self._fits(pending, token, t[TEXT] + extra, (token, *comp_tokens), closed):
                return True
        return False

    def _fits(
        self, pending: Pending, token: int, text: str, spelled: tuple[int, ...], alone: bool
    ) -> bool:
        """Whether text ``text`` (tokens ``spelled``, first ``token``) may follow ``pending``."""
        table = self.table(pending)
        bits = table.close(self._cs(text))
        for k, structure in enumerate(table.structures):
            if not bits >> k & 1:
                continue
            ok, tail = self._group_ok(pending, structure)
            if not ok:
                continue
            if structure[1] and alone:
                return True
            if not structure[1] and self.pairs.closed_group([*tail, *spelled]):
                return True
        return False

    def _cs(self, text: str) -> int:
        return self.strings.id(self.classes.string(text, head=self.classes.reach))

    def _after_partial(self, pending: Pending, token: int, t: Any) -> bool:
        """``token`` after a context ending inside a character: it must continue it."""
        need = missing_bytes(pending.partial)
        if len(t[LEAD]) < need and not t[TEXT] and not t[TRAIL]:
            # still inside the character: canonical if some token can then complete it
            if self.pairs.pair_invalid(pending.ids[-1], token):
                return False
            longer = self.extend(pending, token)
            return any(self._after_partial(longer, d, self.texts[d]) for d in self.lead_ids)
        if len(t[LEAD]) != need:
            return False
        try:
            char = (pending.partial + t[LEAD]).decode("utf-8")
        except UnicodeDecodeError:
            return False
        # the split character and the tokens around it share a pre-token
        base = Pending(
            pending.ids,
            pending.data[: len(pending.data) - len(pending.partial)],
            self.byte_vocab,
            pending.segment,
        )
        table = self.table(base)
        futures: list[tuple[str, tuple[int, ...]]] = [("", ())]
        if t[TRAIL]:
            futures = list(self._trail.get(token, ()))
        for extra, comp_tokens in futures:
            if self.nfc and not self.nfc.is_nfc(pending.segment + char + t[TEXT] + extra):
                continue
            bits = table.close(self._cs(char + t[TEXT] + extra))
            for k, (cuts, joined) in enumerate(table.structures):
                if not bits >> k & 1:
                    continue
                cuts = tuple(len(base.text) + c for c in cuts)
                stops = (*cuts, len(base.text)) if joined and base.text else cuts
                if not set(stops) <= {e for e in pending.ends if e is not None}:
                    continue
                ok, tail = self._close_groups(pending, stops)
                if ok and tail and self.pairs.closed_group([*tail, token, *comp_tokens]):
                    return True
        return False

    def _close_groups(self, pending: Pending, stops: tuple[int, ...]) -> tuple[bool, list[int]]:
        """Whether the tokens grouped by ``stops`` are each their text's BPE; the tokens after."""
        group: list[int] = []
        groups = []
        for t, end in zip(pending.ids, pending.ends, strict=True):
            group.append(t)
            if end is not None and end in stops:
                groups.append(group)
                group = []
        return all(self.pairs.closed_group(g) for g in groups), group

    def settled_run(
        self, text: bytes, start: int, pending: Pending, stop: int
    ) -> tuple[list[int], Pending] | None:
        """The tokens the known ``text`` goes on with after a context, or None.

        ``pending`` (no partial character) ends at ``start``. Returned: the tokens of
        ``text[start:end]`` (``end <= stop``) that every canonical extension of the context
        spelling ``text[start:end]`` starts with, and ``extend``'s pending after them
        (docs/bytes-design.md, *Long texts*).
        """
        if pending.partial:
            return None
        first, backend, out, pos = pending, self.spec.backend, [], start
        chunk = (pending.data + text[start:stop]).decode("utf-8", "replace")  # U+FFFD: no match
        chunk = backend.normalizer.normalize_str(chunk) if self.nfc else chunk
        pieces = backend.pre_tokenizer.pre_tokenize_str(chunk)
        ids = [t.id for piece, _ in pieces for t in backend.model.tokenize(piece)]
        if tuple(ids[: len(pending.ids)]) != pending.ids:
            return None  # the context is not the text's encoding so far
        for t in ids[len(pending.ids) :]:
            b = self.byte_vocab[t] if t < self.n and self.texts[t] is not None else b""
            if not b or pos + len(b) > stop or not text.startswith(b, pos):
                break  # past what is known, or not the text's bytes: what comes before stands
            pending, pos = self.extend(pending, t), pos + len(b)
            out.append((t, pending, pos))
        ends = {end: k for k, (_, _, end) in enumerate(out, 1)}
        # where a pending part starts, no future moves a boundary: the tokens before stand
        for end in sorted({e - len(p.data) for _, p, e in out} & ends.keys(), reverse=True):
            if not self.nfc or self.nfc.is_nfc(first.segment + text[start:end].decode()):
                return [t for t, _, _ in out[: ends[end]]], out[ends[end] - 1][1]
        return None  # (NFC is closed under prefixes: the longest NFC one is taken)

    def complete(self, pending: Pending) -> bool:
        """Whether the context is the tokenizer's encoding of its text (may end the text)."""
        if pending.partial:
            return False
        if not pending.ids:
            return True
        n = len(pending.text)
        cuts = tuple(b - n for b in self.pretok.boundaries(pending.text) if b < n)
        ok, _ = self._group_ok(pending, (cuts, True))
        return ok

"""Added tokens (Qwen3's ``<think>``, Gemma 3's ``</div>``) in canonical tokenizations.

The tokenizer cuts its added tokens' contents out of a text first ([`.added_split`][]),
emits those tokens, and encodes the plain runs between them on their own. So a token
string is canonical when its added tokens sit exactly where that cut puts them in the
text the tokens spell, and each plain run is canonical for the inner filter (byte-level
or SentencePiece BPE) from a fresh start. [`AddedTokensFilter`][] wraps the inner
filter with that rule (docs/bytes.md, *Added tokens*). Special tokens are not cut:
their contents are text, as ``encode_special_tokens`` encodes them.
"""

from __future__ import annotations

import bisect
import unicodedata
from functools import lru_cache
from typing import Any

import numpy as np
import regex

from genlm_bytelm.errors import CanonicalityUnsupportedError
from genlm_bytelm.exact.canonical.added_split import AddedSplit, Content, read_added
from genlm_bytelm.exact.canonical.pending import EMPTY
from genlm_bytelm.exact.canonical.spec import backend_tokenizer, tokenizer_name

__all__ = ["AddedPending", "AddedTokensFilter", "with_added_tokens"]

#: Whitespace as the tokenizer's ``lstrip``/``rstrip`` see it (Rust's ``\s``).
_SPACE = regex.compile(r"\p{White_Space}")
#: Masks kept per unsettled tail before the cache is emptied.
TAILS_KEPT = 256


class AddedPending:
    """The state after a context: the inner filter's, plus what the added-token cut needs.

    ``inner``: the inner filter's state for the plain run since the last added token;
    ``tail``: the text's end from where the cut may still change ([`AddedSplit.settled_start`][]),
    ``spans``: the added tokens in it, ``(start, end, id)``; ``run_end``: the run's last
    bytes (for ``lstrip``); ``after_rstrip``: the run follows an ``rstrip`` token and is empty.
    """

    __slots__ = ("after_rstrip", "inner", "run_end", "spans", "tail")

    def __init__(
        self,
        inner: Any,
        tail: bytes = b"",
        spans: tuple[tuple[int, int, int], ...] = (),
        run_end: bytes = b"",
        after_rstrip: bool = False,
    ) -> None:
        self.inner = inner
        self.tail = tail
        self.spans = spans
        self.run_end = run_end
        self.after_rstrip = after_rstrip

    def __repr__(self) -> str:
        return f"AddedPending({self.inner!r}, tail={self.tail!r}, spans={self.spans})"


class AddedTokensFilter:
    """Canonical next tokens of a tokenizer with added tokens (see module doc).

    The interface of [`CanonicalFilter`][.filter.CanonicalFilter] that ``ExactByteState`` uses, over
    ``inner``, the filter of the tokenizer's BPE.
    """

    def __init__(self, inner: Any, split: AddedSplit, emitted: dict[int, Content]) -> None:
        self.inner = inner
        self.byte_vocab = inner.byte_vocab
        self.n = n = inner.n
        self.split = split
        self.added = {i: c for i, c in emitted.items() if i < n}
        self.is_added = np.zeros(n, dtype=bool)
        self.is_added[list(self.added)] = True
        self.added_ids = np.flatnonzero(self.is_added)
        self.lstrip = np.zeros(n, dtype=bool)
        self.lstrip[[i for i, c in self.added.items() if c.lstrip]] = True
        self.starts_space = np.array([_starts_space(b) for b in self.byte_vocab], dtype=bool)
        #: What ``ExactByteState`` may spell with: the inner filter's tokens and the added ones.
        self.texts = list(inner.texts)
        for i, c in self.added.items():
            self.texts[i] = c.data.decode("utf-8")
        pairs = sorted((bytes(b), i) for i, b in enumerate(self.byte_vocab) if b)
        self._keys = [b for b, _ in pairs]
        self._ids = np.asarray([i for _, i in pairs], dtype=np.int64)
        # after a settled text, each token alone: is it cut where (and only where) it should be
        self._alone = self._consistent_alone()
        self._tails: dict[tuple[bytes, tuple], np.ndarray] = {}
        self.start = AddedPending(EMPTY)

    def _consistent_alone(self) -> np.ndarray:
        """Per token, from a settled text: plain tokens cut nowhere, added tokens cut whole."""
        out = ~self.is_added
        firsts = self.split.first_bytes
        for i, b in enumerate(self.byte_vocab):
            if self.is_added[i] or not firsts.isdisjoint(b):
                out[i] = self._cuts_right(b"", (), i)
        return out

    def _spelled(self, token: int) -> bytes:
        added = self.added.get(token)
        return added.data if added is not None else bytes(self.byte_vocab[token])

    def _cuts_right(self, tail: bytes, spans: tuple, token: int) -> bool:
        """Whether the cut of ``tail`` + the token is ``spans`` (+ the token, if added)."""
        data = tail + self._spelled(token)
        if self.is_added[token]:
            spans = (*spans, (len(tail), len(data), int(token)))
        return self.split.cuts(data) == list(spans)

    def _state(self, pending: Any) -> AddedPending:
        if isinstance(pending, AddedPending):
            return pending
        if pending is EMPTY:
            return self.start
        raise TypeError(f"not an added-token filter state: {pending!r}")

    def _consistent(self, state: AddedPending) -> np.ndarray:
        """Per token: the cut of ``state.tail`` + the token is as the tokens say."""
        if not state.tail:
            return self._alone
        key = (state.tail, state.spans)
        hit = self._tails.get(key)
        if hit is not None:
            return hit
        tail, spans = state.tail, state.spans
        out = self._alone.copy()
        recheck: set[int] = set()
        regions = self.split.regions(tail)
        for p, content in self.split.open_matches(tail, regions):
            rest = content.data[len(tail) - p :]
            lo = bisect.bisect_left(self._keys, rest)
            hi = lo
            while hi < len(self._keys) and self._keys[hi].startswith(rest):
                hi += 1
            ids = self._ids[lo:hi]
            if content.split:
                out[ids] = False  # completes a content the cut would take
            else:
                recheck.update(ids.tolist())  # a special's: it shifts the scan, no cut
        for token in recheck:
            out[token] = self._cuts_right(tail, spans, token)
        out.flags.writeable = False
        if len(self._tails) > TAILS_KEPT:
            self._tails.clear()
        self._tails[key] = out
        return out

    def mask(self, pending: Any) -> np.ndarray:
        """Boolean vector over token ids: ``context + [d]`` is canonical."""
        state = self._state(pending)
        out = self.inner.mask(state.inner) & self._consistent(state)
        if state.after_rstrip:
            out &= ~self.starts_space
        if self.inner.complete(state.inner):
            added = self._consistent(state)[self.added_ids]
            if _ends_space(state.run_end):
                added = added & ~self.lstrip[self.added_ids]
            out[self.added_ids] = added
        else:
            out[self.added_ids] = False
        return out

    def valid_next(self, pending: Any, token: int) -> bool:
        """Whether ``context + [token]`` is canonical (one token; the rules of [`mask`][])."""
        state = self._state(pending)
        token = int(token)
        if state.tail:
            fits = self._cuts_right(state.tail, state.spans, token)
        else:
            fits = bool(self._alone[token])
        if not fits:
            return False
        if self.is_added[token]:
            if self.lstrip[token] and _ends_space(state.run_end):
                return False
            return bool(self.inner.complete(state.inner))
        if state.after_rstrip and self.starts_space[token]:
            return False
        return bool(self.inner.valid_next(state.inner, token))

    def extend(self, pending: Any, token: int) -> AddedPending:
        """The state after ``token`` (assumed canonical next)."""
        state = self._state(pending)
        token = int(token)
        spelled = self._spelled(token)
        data = state.tail + spelled
        spans = state.spans
        added = self.added.get(token)
        if added is not None:
            spans = (*spans, (len(state.tail), len(data), token))
            inner, run_end, after_rstrip = EMPTY, b"", added.rstrip
        else:
            inner = self.inner.extend(state.inner, token)
            run_end, after_rstrip = (state.run_end + spelled)[-4:], False
        start = self.split.settled_start(data, self.split.regions(data))
        kept = tuple((s - start, e - start, i) for s, e, i in spans if s >= start)
        return AddedPending(inner, data[start:], kept, run_end, after_rstrip)

    def complete(self, pending: Any) -> bool:
        """Whether the context is the tokenizer's encoding of its text (may end the text)."""
        return bool(self.inner.complete(self._state(pending).inner))

    def settled_run(
        self, text: bytes, start: int, pending: Any, stop: int
    ) -> tuple[list[int], AddedPending] | None:
        """The inner filter's ``settled_run`` between the cuts, and the cuts themselves.

        Plain text is handed to the inner filter only up to the first place the cut looks
        at (a content, or where one may start); an added token the cut is sure of (no
        longer text could change it) is taken when the run before it is complete.
        """
        run = getattr(self.inner, "settled_run", None)
        state, out, pos = self._state(pending), [], start
        while pos < stop and not state.tail:
            if run is None and text[pos] not in self.split.first_bytes:
                break  # without the inner run only a cut right here is taken: none starts here
            chunk = text[pos:stop]
            regions = self.split.regions(chunk)
            settled = self.split.settled_start(chunk, regions)
            first = regions[0] if regions else None
            limit = min(first.start if first else len(chunk), settled)
            if limit > 0:  # plain text up to there: the inner filter's run
                found = run(text, pos, state.inner, pos + limit) if run is not None else None
                if not found or not found[0]:
                    break
                tokens, inner = found
                if state.after_rstrip and self.starts_space[tokens[0]]:
                    break  # the cut would have taken that space into the token before
                end = pos + sum(len(self.byte_vocab[t]) for t in tokens)
                data = text[pos:end]
                tail = data[self.split.settled_start(data, []) :]
                state = AddedPending(inner, tail, (), (state.run_end + data)[-4:], False)
                out += tokens
                pos = end
                continue
            if first is None or first.start or not first.content.split or first.end > settled:
                break  # no cut here, or one a longer text could still change
            if not self.valid_next(state, first.content.id):
                break
            state = self.extend(state, first.content.id)
            out.append(first.content.id)
            pos += first.end
        return (out, state) if out else None

    def warm(self, length: int = 4) -> int:
        """The inner filter's [`warm`][]."""
        return self.inner.warm(length)


def _starts_space(data: bytes) -> bool:
    """Whether these bytes start with a whole whitespace character."""
    for size in range(1, min(4, len(data)) + 1):
        try:
            return bool(_SPACE.fullmatch(data[:size].decode("utf-8")))
        except UnicodeDecodeError:
            continue
    return False


def _ends_space(run_end: bytes) -> bool:
    """Whether a run ending with these bytes ends with a whole whitespace character."""
    for back in range(1, min(4, len(run_end)) + 1):
        try:
            ch = run_end[-back:].decode("utf-8")
        except UnicodeDecodeError:
            continue
        return bool(_SPACE.fullmatch(ch[-1]))
    return False


def with_added_tokens(inner: Any, tokenizer: Any) -> Any:
    """``inner``, wrapped in an [`AddedTokensFilter`][] when the tokenizer cuts added tokens.

    Raises:
        CanonicalityUnsupportedError: An added token the emulation does not cover.
    """
    backend = backend_tokenizer(tokenizer)
    sentencepiece = hasattr(inner, "byte_of")
    # the inner filter has read the normalizer: none (or an empty Sequence) leaves text as is
    plain = not sentencepiece and inner.spec.normalizer is None
    name = tokenizer_name(tokenizer)
    # SentencePiece texts never hold a literal "▁" (it is their space): such contents never match
    writable = (lambda c: "\u2581" not in c) if sentencepiece else (lambda c: True)
    try:
        split, emitted = read_added(backend, inner.byte_vocab, writable, plain)
    except ValueError as e:
        _unsupported(name, str(e))
    if not emitted:
        return inner
    if sentencepiece and inner.spec.dummy_prefix:
        _unsupported(name, "its plain runs after an added token would each get a dummy prefix")
    if getattr(inner, "nfc", None) is not None:
        made = _nfc_images()
        for c in emitted.values():
            odd = sorted(set(c.data.decode()) & made)
            if odd:
                _unsupported(name, f"NFC makes {odd} of other characters, and {c.data!r} holds it")
    _check_specials_not_bpe(name, backend, split)
    return AddedTokensFilter(inner, split, emitted)


def _check_specials_not_bpe(name: str, backend: Any, split: AddedSplit) -> None:
    """A special token's content is text here: BPE must not make the special token of it."""
    for stage in split.passes:
        for c in stage.by_data.values():
            if c.split:
                continue
            text = c.data.decode()
            if backend.normalizer is not None:
                text = backend.normalizer.normalize_str(text)
            pieces = (
                [p for p, _ in backend.pre_tokenizer.pre_tokenize_str(text)]
                if backend.pre_tokenizer is not None
                else [text]
            )
            if len(pieces) == 1 and [t.id for t in backend.model.tokenize(pieces[0])] == [c.id]:
                _unsupported(name, f"BPE makes the special token {c.data!r} of its own text")


@lru_cache(maxsize=1)
def _nfc_images() -> frozenset[str]:
    """Characters NFC makes of another single character (e.g. ``K`` of the Kelvin sign)."""
    out: set[str] = set()
    for c in range(0x30000):
        if 0xD800 <= c < 0xE000:
            continue
        ch = chr(c)
        normal = unicodedata.normalize("NFC", ch)
        if normal != ch:
            out.update(normal)
    return frozenset(out)


def _unsupported(name: str, why: str) -> None:
    raise CanonicalityUnsupportedError(
        f"ExactByteState cannot compute canonical tokenizations for {name}: {why}; use "
        f"ByteBeamState, which sums over every tokenization."
    )

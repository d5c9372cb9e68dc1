"""Brute-force byte-level probabilities: the oracle ``ExactByteState`` is tested against.

Written without genlm-core's code: plain transformers forwards in float64, token bytes
from the tokenizer's own strings (GPT-2's byte alphabet, written out here), every
tokenization enumerated, and canonicality asked of the tokenizer's encoder:

* ``t`` is **canonical** when, for some continuation ``s`` of its text, the encoder's
  tokens of ``bytes(t) + s`` start with ``t`` (special tokens are never parsed from
  text). Continuations tried: the end of the text, every printable ASCII character,
  some other characters, and some pairs; a text ending inside a UTF-8 character is
  completed first (with many of the characters its bytes can start).
* ``q(b)`` sums ``p(t)`` over the token strings covering ``b`` (all tokens but the last
  end inside ``b``, the last one starts with the rest of ``b``), canonical ones only or
  all of them; the next byte ``x`` has probability ``q(bx) / (sum_y q(by) + q_EOS(b))``,
  ``q_EOS(b)`` summing ``p(t) p(eos | t)`` over ``t`` spelling ``b`` exactly (canonical:
  ``t`` is the encoder's tokens of ``b``).
"""

from __future__ import annotations

import bisect
import functools
import math
from typing import Any

import numpy as np
import torch

#: Continuations tried after a token string, cheapest first.
FUTURES = (
    [""]
    + [chr(c) for c in range(32, 127)]
    + list("\t\n\r\x0b\x0c")
    + ["é", "中", "😀", "\u00a0", "\u3000", "\u2003", "٣", "\u0301", "\x85", "\u200b"]
    + [a + b for a in " \t\n'.a1中" for b in " \t\n'.a1lsreA中"]
    + ["'ll", "'re", "'ve", "  a", "\n\na", "\n \n"]
)
#: Continuations tried after completing a split character.
SHORT_FUTURES = (
    ["", " ", "\n", "中", "a ", "  a"]
    + [chr(c) for c in range(ord("a"), ord("z") + 1)]
    + [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    + list("0123456789.,!?'-\t")
)


def gpt2_bytes() -> dict[str, int]:
    """GPT-2's byte alphabet (printable stand-in character -> byte)."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), 256)]
    cs = list(bs)
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


def _completions(partial: bytes) -> list[str]:
    """Characters whose UTF-8 starts with ``partial`` (all for one missing byte, a spread else)."""
    lead = partial[0]
    size = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    missing = size - len(partial)
    if not 0xC2 <= lead <= 0xF4 or missing < 1:
        return []  # not the start of a character
    spreads = {1: [range(0x80, 0xC0)], 2: [range(0x80, 0xC0), range(0x80, 0xC0, 4)]}
    spreads[3] = [range(0x80, 0xC0), range(0x80, 0xC0, 8), range(0x80, 0xC0, 16)]
    out = []
    for tail in _product(spreads[missing]):
        try:
            out.append((partial + bytes(tail)).decode("utf-8"))
        except UnicodeDecodeError:
            continue
    return out


def _product(ranges: list[range]) -> list[list[int]]:
    out: list[list[int]] = [[]]
    for r in ranges:
        out = [x + [y] for x in out for y in r]
    return out


class ByteOracle:
    """Next-byte log-probabilities of a Hugging Face causal LM by enumeration.

    Args:
        model: A transformers causal LM (run in float64 here), or None to ask only
            about canonicality.
        tokenizer: Its fast tokenizer.
    """

    def __init__(self, model: Any, tokenizer: Any) -> None:
        from tokenizers import Tokenizer

        self.model = model
        self.tokenizer = tokenizer
        self.encoder = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
        self.encoder.encode_special_tokens = True  # never parse special tokens from text
        self.width = (
            model.get_output_embeddings().weight.shape[0] if model is not None else len(tokenizer)
        )
        alphabet = gpt2_bytes()
        added = {i: t.content for i, t in tokenizer.added_tokens_decoder.items()}
        self.special = set(added)
        self.vocab: list[bytes] = [b""] * self.width
        for s, i in tokenizer.get_vocab().items():
            if i >= self.width:
                continue
            self.vocab[i] = added[i].encode() if i in added else bytes(alphabet[c] for c in s)
        self.start = tokenizer.bos_token_id
        if self.start is None:
            self.start = tokenizer.eos_token_id
        self._exact: dict[bytes, list[int]] = {}
        for i, b in enumerate(self.vocab):
            if b:
                self._exact.setdefault(b, []).append(i)
        entries = sorted((b, i) for i, b in enumerate(self.vocab) if b)
        self._keys = [b for b, _ in entries]
        self._ids = [i for _, i in entries]
        self._rows: dict[tuple[int, ...], np.ndarray] = {}
        self._canonical_after: dict[tuple[int, ...], dict[int, bool]] = {}

    # -- model -------------------------------------------------------------------------

    def logprobs(self, context: tuple[int, ...]) -> np.ndarray:
        """float64 log-softmax of the model's next-token logits after ``context``."""
        row = self._rows.get(context)
        if row is None:
            with torch.no_grad():
                ids = torch.tensor([list(context)])
                logits = self.model(input_ids=ids).logits[0, -1].to(torch.float64)
            row = self._rows[context] = torch.log_softmax(logits, -1).numpy()
        return row

    def logp(self, tokens: tuple[int, ...]) -> float:
        """``log p(tokens)`` after the start token."""
        out, context = 0.0, (self.start,)
        for t in tokens:
            out += float(self.logprobs(context)[t])
            context = (*context, t)
        return out

    # -- vocabulary ----------------------------------------------------------------------

    def starting_with(self, prefix: bytes) -> list[int]:
        """Token ids whose bytes start with ``prefix``."""
        lo = bisect.bisect_left(self._keys, prefix)
        out = []
        while lo < len(self._keys) and self._keys[lo].startswith(prefix):
            out.append(self._ids[lo])
            lo += 1
        return out

    def tokenizations(self, data: bytes, canonical: bool) -> list[tuple[int, ...]]:
        """Every token string spelling exactly ``data`` (canonical ones only, if asked)."""
        return list(self._tokenizations(data, canonical, ()))

    def _tokenizations(self, data: bytes, canonical: bool, head: tuple[int, ...]):
        if not data:
            yield head
            return
        for n in range(1, len(data) + 1):
            for t in self._exact.get(data[:n], ()):
                if canonical and t in self.special:
                    continue
                ids = (*head, t)
                if canonical and not self.canonical(ids):
                    continue
                yield from self._tokenizations(data[n:], canonical, ids)

    # -- canonicality ----------------------------------------------------------------------

    @functools.cache  # noqa: B019 - the oracle lives for a test session
    def canonical(self, ids: tuple[int, ...]) -> bool:
        """Whether ``ids`` start the encoder's tokens of their text plus some continuation."""
        return self.canonical_after(ids[:-1], [ids[-1]])[0]

    def canonical_after(self, context: tuple[int, ...], lasts: list[int]) -> list[bool]:
        """:meth:`canonical` of ``context + (d,)`` for each ``d`` in ``lasts``.

        Answers are remembered per ``(context, d)``: the byte-by-byte checks ask about
        the same token strings again for every prefix length.
        """
        known = self._canonical_after.setdefault(context, {})
        unknown = [d for d in dict.fromkeys(lasts) if d not in known]
        if unknown:
            known.update(
                zip(unknown, self._canonical_after_uncached(context, unknown), strict=True)
            )
        return [known[d] for d in lasts]

    def _canonical_after_uncached(self, context: tuple[int, ...], lasts: list[int]) -> list[bool]:
        head = b"".join(self.vocab[t] for t in context)
        out = [False] * len(lasts)
        todo = []
        for k, d in enumerate(lasts):
            if d in self.special or not self.vocab[d]:
                continue
            data = head + self.vocab[d]
            text, partial = _split(data)
            if text is None:
                continue
            todo.append((k, text, partial))
        n = len(context) + 1
        whole = [(k, text) for k, text, partial in todo if not partial]
        for future in FUTURES:
            if not whole:
                break
            encoded = self.encoder.encode_batch(
                [t + future for _, t in whole], add_special_tokens=False
            )
            left = []
            for (k, text), enc in zip(whole, encoded, strict=True):
                if tuple(enc.ids[:n]) == (*context, lasts[k]):
                    out[k] = True
                else:
                    left.append((k, text))
            whole = left
        for k, text, partial in todo:
            if partial:
                out[k] = self._completed(context, lasts[k], text, partial)
        return out

    def _completed(self, context: tuple[int, ...], last: int, text: str, partial: bytes) -> bool:
        n = len(context) + 1
        want = (*context, last)
        texts = [text + c for c in _completions(partial)]
        for future in SHORT_FUTURES:
            encoded = self.encoder.encode_batch(
                [t + future for t in texts], add_special_tokens=False
            )
            if any(tuple(e.ids[:n]) == want for e in encoded):
                return True
        return False

    def complete(self, ids: tuple[int, ...]) -> bool:
        """Whether ``ids`` are exactly the encoder's tokens of their (whole) text."""
        data = b"".join(self.vocab[t] for t in ids)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return tuple(self.encoder.encode(text, add_special_tokens=False).ids) == ids

    # -- byte probabilities ----------------------------------------------------------------

    def next_byte_logprobs(
        self, data: bytes, canonical: bool, eos_ids: list[int] | None = None
    ) -> np.ndarray:
        """258 log-probabilities: next bytes, EOT (-inf) and EOS, given ``data``."""
        eos_ids = list(eos_ids or [])
        q = np.zeros(256)
        eos = 0.0
        for j in range(len(data) + 1):
            for context in self.tokenizations(data[:j], canonical):
                base = self.logp(context)
                row = self.logprobs((self.start, *context))
                lasts = [
                    t for t in self.starting_with(data[j:]) if len(self.vocab[t]) > len(data) - j
                ]
                lasts = [t for t in lasts if t not in eos_ids]
                if canonical and lasts:
                    keep = self.canonical_after(context, lasts)
                    lasts = [t for t, ok in zip(lasts, keep, strict=True) if ok]
                for t in lasts:
                    q[self.vocab[t][len(data) - j]] += math.exp(base + row[t])
                if j == len(data) and eos_ids and (not canonical or self.complete(context)):
                    eos += sum(math.exp(base + row[e]) for e in eos_ids)
        total = q.sum() + eos
        with np.errstate(divide="ignore"):
            out = np.full(258, -np.inf)
            out[:256] = np.log(q) - math.log(total)
            out[257] = math.log(eos) - math.log(total) if eos > 0 else -np.inf
        return out

    def log_prefix_prob(
        self, data: bytes, canonical: bool, eos_ids: list[int] | None = None
    ) -> float:
        """``log q(data)``: covers of ``data`` (the last token starts inside it)."""
        eos_ids = set(eos_ids or [])
        total = 0.0
        for j in range(len(data)):
            for context in self.tokenizations(data[:j], canonical):
                base = self.logp(context)
                row = self.logprobs((self.start, *context))
                lasts = [t for t in self.starting_with(data[j:]) if t not in eos_ids]
                if canonical and lasts:
                    keep = self.canonical_after(context, lasts)
                    lasts = [t for t, ok in zip(lasts, keep, strict=True) if ok]
                total += sum(math.exp(base + row[t]) for t in lasts)
        return math.log(total) if total > 0 else -math.inf


def _split(data: bytes) -> tuple[str | None, bytes]:
    """``data`` as text plus a trailing partial character, or None if not UTF-8 at all."""
    for back in range(0, min(3, len(data)) + 1):
        try:
            return data[: len(data) - back].decode("utf-8"), data[len(data) - back :]
        except UnicodeDecodeError:
            continue
    return None, b""

"""The brute-force byte oracle for SentencePiece-style tokenizers (byte fallback, ``▁``).

:class:`~byte_oracle.ByteOracle` with the token bytes of a SentencePiece vocabulary
(``▁`` is a space, ``<0xXX>`` its byte, written out here) and canonicality asked of the
tokenizer's encoder on the texts a byte string can come from: the bytes themselves, and
for a dummy-prefix tokenizer (Llama-2, Mistral) the bytes without their first space.
A token string is canonical when the encoder's tokens of one of those texts plus some
continuation start with it; a witness is found by the encoder, never assumed. (The
encoder still splits out Gemma 3's non-special added tags such as ``<table>``: the test
strings hold no ``<``.)
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from byte_oracle import FUTURES, SHORT_FUTURES, ByteOracle, _completions, _split

_BYTE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


class SentencePieceOracle(ByteOracle):
    """Next-byte log-probabilities by enumeration, for a SentencePiece-style tokenizer."""

    def __init__(self, model: Any, tokenizer: Any) -> None:
        from tokenizers import Tokenizer

        self.model = model
        self.tokenizer = tokenizer
        self.encoder = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
        self.encoder.encode_special_tokens = True
        self.width = (
            model.get_output_embeddings().weight.shape[0] if model is not None else len(tokenizer)
        )
        added = {i: t.content for i, t in tokenizer.added_tokens_decoder.items()}
        # Added tokens are never parsed from text, but Gemma 3's added newline, tab and
        # "▁" runs are also what its BPE makes of them: those are ordinary pieces.
        model = self.encoder.model
        self.special = {i for i, c in added.items() if [t.id for t in model.tokenize(c)] != [i]}
        added = {i: c for i, c in added.items() if i in self.special}
        self.vocab: list[bytes] = [b""] * self.width
        for s, i in tokenizer.get_vocab().items():
            if i >= self.width:
                continue
            m = _BYTE.fullmatch(s)
            if i in added:
                self.vocab[i] = added[i].encode()
            elif m:
                self.vocab[i] = bytes([int(m.group(1), 16)])
            else:
                self.vocab[i] = s.replace("\u2581", " ").encode()
        self.start = tokenizer.bos_token_id
        self._exact: dict[bytes, list[int]] = {}
        for i, b in enumerate(self.vocab):
            if b:
                self._exact.setdefault(b, []).append(i)
        entries = sorted((b, i) for i, b in enumerate(self.vocab) if b)
        self._keys = [b for b, _ in entries]
        self._ids = [i for _, i in entries]
        self._rows: dict[tuple[int, ...], np.ndarray] = {}

    @staticmethod
    def _sources(text: str) -> list[str]:
        """Texts whose encoding may spell ``text``: itself, and without a dummy-prefix space."""
        return [text, text[1:]] if text.startswith(" ") else [text]

    def _starts(self, texts: list[str], want: tuple[int, ...], futures: list[str]) -> bool:
        n = len(want)
        for future in futures:
            batch = [s + future for t in texts for s in self._sources(t)]
            encoded = self.encoder.encode_batch(batch, add_special_tokens=False)
            if any(tuple(e.ids[:n]) == want for e in encoded):
                return True
        return False

    def canonical_after(self, context: tuple[int, ...], lasts: list[int]) -> list[bool]:
        head = b"".join(self.vocab[t] for t in context)
        out = [False] * len(lasts)
        for k, d in enumerate(lasts):
            if d in self.special or not self.vocab[d]:
                continue
            text, partial = _split(head + self.vocab[d])
            if text is None:
                continue
            want = (*context, d)
            if partial:
                texts = [text + c for c in _completions(partial)]
                out[k] = bool(texts) and self._starts(texts, want, SHORT_FUTURES)
            else:
                out[k] = self._starts([text], want, FUTURES)
        return out

    def complete(self, ids: tuple[int, ...]) -> bool:
        data = b"".join(self.vocab[t] for t in ids)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return any(
            tuple(self.encoder.encode(s, add_special_tokens=False).ids) == ids
            for s in self._sources(text)
        )

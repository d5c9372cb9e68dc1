"""Exact log-likelihood of a text under a language model, in bits per byte.

Byte-level log-likelihoods compare across tokenizers, token-level ones do not.
[`log_likelihood`][] is ``ExactByteState.prefill(text).logZ``: one prefix forward.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from genlm_bytelm.byte_lm.lm_state import _as_bytes
from genlm_bytelm.exact.state import ExactByteState
from genlm_bytelm.probs import EOS
from genlm_core.errors import InvalidArgumentError

__all__ = ["TextLikelihood", "log_likelihood"]


class TextLikelihood(NamedTuple):
    """The log-probability of a text (``logprob``, nats; -inf if impossible) and ``n_bytes``."""

    logprob: float
    n_bytes: int

    @property
    def bits_per_byte(self) -> float:
        """``-log2(probability) / n_bytes`` (comparable across tokenizers)."""
        return -self.logprob / (self.n_bytes * math.log(2)) if self.n_bytes else 0.0


async def log_likelihood(
    llm: Any, text: Any, *, eos_byte_strings: Any = None, ends: bool = False
) -> TextLikelihood:
    """The exact byte-level log-probability of ``text`` under ``llm``.

    Args:
        llm: An AsyncLM with a byte-level BPE or SentencePiece BPE tokenizer.
        text: The bytes. Llama-2 and Mistral read a text as the bytes its encoding spells,
            the dummy-prefix space first (``b" Hi"`` for ``"Hi"``).
        eos_byte_strings: The tokens that end a text (needed with ``ends``).
        ends: The probability that the text is written and then ends (EOS after it),
            rather than that the model's text starts with it (the default).

    Raises:
        CanonicalityUnsupportedError: The tokenizer is not covered (use
            ``ByteBeamState(...).prefill(text)`` and its ``logZ`` for an estimate).
    """
    data = _as_bytes(text)
    state = await ExactByteState.initial(llm, eos_byte_strings=eos_byte_strings)
    state = await state.prefill(data)
    if ends:
        if not eos_byte_strings:
            raise InvalidArgumentError(
                "ends=True needs eos_byte_strings, the tokens that end a text "
                "(e.g. [bytes(llm.byte_vocab[llm.tokenizer.eos_token_id])])"
            )
        state = await (state << EOS)
    return TextLikelihood(state.logZ, len(data))

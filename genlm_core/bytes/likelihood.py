"""Exact log-likelihood of a text under a language model, in bits per byte.

Token-level log-likelihoods are not comparable across tokenizers (a text has more
tokens under one than another); byte-level ones are. :func:`log_likelihood` reads the
text with :class:`~genlm_core.bytes.ExactByteState` and returns ``log q(text)``: the sum
of the model's probabilities of every canonical tokenization covering the text, the
exact value ``ByteBeamState.logZ`` estimates. One prefix forward along the text's
tokenization does it (see :meth:`ExactByteState.prefill`)::

    result = await log_likelihood(llm, b"An apple a day keeps the doctor away.")
    print(result.bits_per_byte)
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from genlm_core.bytes.byte_lm.lm_state import _as_bytes
from genlm_core.bytes.exact.state import ExactByteState
from genlm_core.bytes.probs import EOS
from genlm_core.errors import InvalidArgumentError

__all__ = ["TextLikelihood", "log_likelihood"]


class TextLikelihood(NamedTuple):
    """The log-probability of a text and its length.

    Attributes:
        logprob: Natural log of the probability (``-inf`` if the model cannot write it).
        n_bytes: Length of the text in bytes.
    """

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
        llm: An AsyncLM with a byte-level BPE tokenizer (GPT-2, Llama-3, SmolLM2, ...)
            or a SentencePiece BPE one (Llama-2, Mistral v0.1, Gemma 3).
        text: The bytes (encode a ``str`` first). Llama-2 and Mistral read a text as the
            bytes its encoding spells, the dummy-prefix space first (``b" Hi"`` for
            ``"Hi"``): pass those for a text's probability.
        eos_byte_strings: The tokens that end a text (needed with ``ends``), e.g.
            ``[b"<|endoftext|>"]``.
        ends: The probability that the text is written and then ends (EOS after it),
            rather than that the model's text starts with it (the default).

    Returns:
        :class:`TextLikelihood` (``logprob`` in nats, ``bits_per_byte``).

    Raises:
        CanonicalityUnsupportedError: The tokenizer is not byte-level BPE (use
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

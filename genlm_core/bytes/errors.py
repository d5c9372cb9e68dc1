"""The errors of the byte-level LM.

Each derives from :class:`~genlm_core.errors.GenlmError` and from the builtin that
genlm-bytes 0.2.0 raises (or would have raised) in the same place, so code written
for genlm-bytes keeps catching them.
"""

from __future__ import annotations

from genlm_core.errors import GenlmError, UnsupportedTokenizerError

__all__ = [
    "CanonicalityUnsupportedError",
    "EmptyBeamError",
    "InvalidBeamParamsError",
    "InvalidByteError",
    "InvalidByteProbsError",
    "MissingStartTokenError",
    "NaNLogProbError",
    "NotMaterializedError",
]


class InvalidBeamParamsError(GenlmError, ValueError, TypeError):
    """A :class:`~genlm_core.bytes.BeamParams` field has a value it cannot take.

    genlm-bytes raises ValueError for a negative ``prune_threshold`` and TypeError for
    ``eos_tokens`` given with ``eos_byte_strings``; this error is both.
    """


class InvalidByteError(GenlmError, ValueError):
    """A byte outside 0-255 (or ``EOS`` = 257 where that is allowed) was given."""


class EmptyBeamError(GenlmError, AssertionError):
    """A beam with no candidate was asked for probabilities or advanced further.

    genlm-bytes asserts ``len(beam) > 0``; the beam empties when the bytes it was fed
    have no tokenization it kept (see ``BeamParams.heal``).
    """


class InvalidByteProbsError(GenlmError, ValueError, AssertionError):
    """``LazyByteProbs`` got a vector that is not 258 long (bytes, EOT, EOS)."""


class NotMaterializedError(GenlmError, ValueError):
    """A trie state's masses were read before ``await state.materialize()``."""


class MissingStartTokenError(GenlmError, ValueError):
    """The tokenizer has neither a BOS nor an EOS token to start the context with."""


class CanonicalityUnsupportedError(UnsupportedTokenizerError):
    """``ExactByteState`` does not cover this tokenizer; ``ByteBeamState`` works with any.

    Raised for tokenizers that are not byte-level BPE (SentencePiece, Unigram, byte
    fallback) or whose normalizer or pre-tokenizer canonicality cannot be read from,
    and for those whose canonicality search the filter cannot bound (named with the
    bound, when the filter is built: never during generation).
    """


class NaNLogProbError(GenlmError, ValueError):
    """A log-probability (or beam weight) to normalise is NaN.

    genlm-bytes drops NaN in ``logsumexp``, which silently renormalises the rest; a
    NaN means a model or a computation upstream went wrong, so it is raised instead.
    """

"""The errors of the byte-level LM.

Each derives from [`GenlmError`][genlm_core.errors.GenlmError] and from the builtin genlm-bytes
0.2.0 raises (or would have raised) in the same place, so its callers keep catching them.
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
    """A [`BeamParams`][genlm_bytelm.BeamParams] field has a value it cannot take.

    Both a ValueError and a TypeError: genlm-bytes raises either, depending on the field.
    """


class InvalidByteError(GenlmError, ValueError):
    """A byte outside 0-255 (or ``EOS`` = 257 where that is allowed) was given."""


class EmptyBeamError(GenlmError, AssertionError):
    """A beam with no candidate was asked for probabilities or advanced further.

    It empties when no kept tokenization spells the bytes fed (see ``BeamParams.heal``).
    """


class InvalidByteProbsError(GenlmError, ValueError, AssertionError):
    """``LazyByteProbs`` got a vector that is not 258 long (bytes, EOT, EOS)."""


class NotMaterializedError(GenlmError, ValueError):
    """A trie state's masses were read before ``await state.materialize()``."""


class MissingStartTokenError(GenlmError, ValueError):
    """The tokenizer has neither a BOS nor an EOS token to start the context with."""


class CanonicalityUnsupportedError(UnsupportedTokenizerError):
    """``ExactByteState`` does not cover this tokenizer; ``ByteBeamState`` works with any.

    Raised when the filter is built (never during generation): the message names the part.
    """


class NaNLogProbError(GenlmError, ValueError):
    """A log-probability (or beam weight) to normalise is NaN (genlm-bytes silently dropped it)."""

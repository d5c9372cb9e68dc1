"""Errors raised by the tries on bad input: ``GenlmError`` and ``ValueError`` both.

``except ValueError`` (what genlm-backend callers wrote) keeps working.
"""

from __future__ import annotations

from genlm_core.errors import GenlmError

__all__ = ["InvalidVocabularyError", "InvalidWeightsError", "VocabularyTypeError"]


class InvalidWeightsError(GenlmError, ValueError):
    """Token weights of the wrong shape, dtype or dimension, or containing NaN."""


class InvalidVocabularyError(GenlmError, ValueError):
    """A vocabulary entry cannot be put in a trie (not iterable, duplicated, ...)."""


class VocabularyTypeError(InvalidVocabularyError, TypeError):
    """A vocabulary entry has the wrong type (e.g. not a Token where Tokens are required)."""

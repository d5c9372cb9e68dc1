"""Canonical tokenizations of byte-level BPE tokenizers, for ``ExactByteState``.

:class:`~genlm_core.bytes.exact.canonical.filter.CanonicalFilter` says which next tokens keep
a token string canonical (a prefix of the tokenizer's encoding of some text).
"""

from genlm_core.bytes.exact.canonical.filter import CanonicalFilter
from genlm_core.bytes.exact.canonical.pending import EMPTY, Pending

__all__ = ["EMPTY", "CanonicalFilter", "Pending"]

"""Canonical tokenizations for ``ExactByteState``: which next tokens keep a string canonical."""

from genlm_core.bytes.exact.canonical.filter import CanonicalFilter
from genlm_core.bytes.exact.canonical.pending import EMPTY, Pending

__all__ = ["EMPTY", "CanonicalFilter", "Pending"]

"""Canonical tokenizations for ``ExactByteState``: which next tokens keep a string canonical."""

from genlm_bytelm.exact.canonical.filter import CanonicalFilter
from genlm_bytelm.exact.canonical.pending import EMPTY, Pending

__all__ = ["EMPTY", "CanonicalFilter", "Pending"]

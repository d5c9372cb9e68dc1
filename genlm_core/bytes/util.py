"""genlm-bytes' ``genlm.bytes.util`` (import path kept): :mod:`genlm_core.compat.genlm_bytes`."""

from genlm_core.compat.genlm_bytes import (
    Chart,
    LazyByteProbs,
    escape,
    format_byte,
    format_table,
    logsumexp,
)

__all__ = ["Chart", "LazyByteProbs", "escape", "format_byte", "format_table", "logsumexp"]

"""genlm-bytes' ``genlm.bytes.util`` (import path kept): its names, from the core."""

from genlm_core.bytes.chart import Chart
from genlm_core.bytes.display import escape, format_byte, format_table
from genlm_core.bytes.probs import LazyByteProbs, logsumexp

__all__ = ["Chart", "LazyByteProbs", "escape", "format_byte", "format_table", "logsumexp"]

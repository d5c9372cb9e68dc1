"""genlm-bytes' ``genlm.bytes.util`` (import path kept): its names, from the core."""

from genlm_bytelm.chart import Chart
from genlm_bytelm.display import escape, format_byte, format_table
from genlm_bytelm.probs import LazyByteProbs, logsumexp

__all__ = ["Chart", "LazyByteProbs", "escape", "format_byte", "format_table", "logsumexp"]

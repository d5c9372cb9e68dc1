"""Measure what handing each caller its own row costs, in the same run.

Since issue 23 every tensor a caller receives is a copy of the cached row (callers mask
rows in place). :func:`rows_shared` brings back, for the duration of a ``with`` block,
the earlier behaviour of returning the cached row itself: unsafe for callers that mask
in place, and here only to time the copies against their absence.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from genlm_core.lm import _rows


@contextlib.contextmanager
def rows_shared() -> Iterator[None]:
    """Inside the block, callers get the shared row, not a copy (benchmarks only)."""
    saved = _rows.private
    _rows.private = lambda row: row
    try:
        yield
    finally:
        _rows.private = saved

"""Argument checks shared by the core and its plugins (each keeps its own messages)."""

from __future__ import annotations

import math
import numbers
from typing import Any

__all__ = ["is_int_at_least", "is_integer", "is_seconds"]


def is_int_at_least(value: Any, minimum: int) -> bool:
    """True for a Python ``int`` (not a ``bool``, an ``int`` subclass) that is ``>= minimum``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def is_integer(value: Any) -> bool:
    """True for any integral number (``int``, NumPy integers) that is not a ``bool``.

    For values from array code (token ids, byte values, counts).
    """
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_seconds(value: Any) -> bool:
    """True for a finite real number >= 0 that is not a ``bool`` (a delay, a timeout)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )

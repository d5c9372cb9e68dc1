"""Which candidates a beam's next ``prune()`` is certain to drop, before computing them.

While the beam reads a known text (``prefill``), every byte is followed by
``prune()``: keep the states whose share of the beam's probability exceeds the
threshold, then the ``K`` heaviest. A state that ends a token must be materialized
(a model call and a trie call) before reading the byte, but its weight after the
byte can only be lower than before (a byte's mass is part of the token's), so that
weight is an upper bound. A candidate is certainly dropped when at least ``K``
exactly known states weigh more than its bound, or when its bound is at most the
threshold share of the known states' total. Dropping it unseen also lowers the
total the next prune divides by; that is harmless as long as every known state's
keep/drop decision is the same at both ends of the total's possible range.

Pure functions over weights (log-probabilities), so they are tested against a brute
force over every possible outcome.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from genlm_core.bytes.probs import reject_nan

__all__ = ["certainly_dropped", "decisions_unchanged"]


def _logsumexp(weights: Sequence[float]) -> float:
    if any(math.isnan(w) for w in weights):
        reject_nan(np.asarray(weights, dtype=np.float64), "beam pruning")
    finite = [w for w in weights if w > -math.inf]
    if not finite:
        return -math.inf
    m = max(finite)
    return m + math.log(sum(math.exp(w - m) for w in finite))


def certainly_dropped(
    bounds: Sequence[float], known: Sequence[float], k: int, log_threshold: float
) -> list[bool]:
    """For each candidate weight bound, whether the next prune drops it whatever it is.

    Args:
        bounds: Upper bounds of the unknown candidates' weights.
        known: Exact weights of the other states of the beam.
        k: The beam width.
        log_threshold: ``log(prune_threshold)`` (``-inf`` for none).

    Raises:
        NaNLogProbError: A bound or a known weight is NaN.
    """
    if any(math.isnan(b) for b in bounds):
        reject_nan(np.asarray(bounds, dtype=np.float64), "beam pruning (candidate bounds)")
    order = np.sort(np.asarray(known, dtype=np.float64))[::-1]
    log_total = _logsumexp(known)
    out = []
    for bound in bounds:
        heavier = int(np.searchsorted(-order, -bound, side="left"))  # known weights > bound
        out.append(heavier >= k or bound - log_total <= log_threshold)
    return out


def decisions_unchanged(
    known: Sequence[float], dropped_bounds: Sequence[float], log_threshold: float
) -> bool:
    """Whether leaving out candidates (with these weight bounds) changes no known state's fate.

    The next prune compares each weight with the total of the beam; without the
    dropped candidates that total is lower, by at most their bounds' total.

    Raises:
        NaNLogProbError: A known weight or a bound is NaN.
    """
    low = _logsumexp(known)  # first: it rejects NaN weights
    if not dropped_bounds or log_threshold == -math.inf:
        return True
    high = float(np.logaddexp(low, _logsumexp(dropped_bounds)))
    return all((w - low > log_threshold) == (w - high > log_threshold) for w in known)

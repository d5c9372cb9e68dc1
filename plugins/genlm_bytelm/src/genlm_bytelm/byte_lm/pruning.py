"""Which candidates a beam's next ``prune()`` is certain to drop, before computing them.

A candidate's weight after the next byte is at most its weight now, so it is dropped
unseen when ``K`` known states outweigh that bound or the bound is below the threshold
share, provided no known state's keep/drop decision changes. Pure functions of weights.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from genlm_bytelm.probs import reject_nan

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

    ``known``: the exact weights of the beam's other states; ``log_threshold``:
    ``log(prune_threshold)`` (``-inf`` for none). A NaN raises ``NaNLogProbError``.
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
    """Whether leaving out candidates (these weight bounds) changes no known state's fate.

    Without them the beam's total is lower, by at most their bounds' total. A NaN raises.
    """
    low = _logsumexp(known)  # first: it rejects NaN weights
    if not dropped_bounds or log_threshold == -math.inf:
        return True
    high = float(np.logaddexp(low, _logsumexp(dropped_bounds)))
    return all((w - low > log_threshold) == (w - high > log_threshold) for w in known)

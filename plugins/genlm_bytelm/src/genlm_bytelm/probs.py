"""``LazyByteProbs`` (a next-byte distribution: bytes 0-255, EOT 256, EOS 257) and ``logsumexp``.

[`next_byte_logps`][] and [`check_byte`][] serve both byte states. Kept from genlm-bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from genlm_bytelm.errors import InvalidByteError, InvalidByteProbsError, NaNLogProbError
from genlm_core.checks import is_integer

__all__ = ["EOS", "EOT", "LazyByteProbs", "check_byte", "logsumexp", "next_byte_logps"]

EOT = 256  #: index of end-of-token
EOS = 257  #: index (and virtual byte) of end-of-sequence


class LazyByteProbs:
    """(Log-)probabilities of the next byte, EOT and EOS, as one 258-entry vector.

    Args:
        ps: 258 values: bytes 0-255, EOT (256), EOS (257).
        log_space: Whether ``ps`` are log-probabilities (default) or probabilities.

    Raises:
        InvalidByteProbsError: ``ps`` does not have 258 entries.
    """

    def __init__(self, ps: Any, log_space: bool = True) -> None:
        if len(ps) != 258:
            raise InvalidByteProbsError(
                f"LazyByteProbs needs 258 values (256 bytes, EOT, EOS), got {len(ps)}"
            )
        self.ps = ps
        self.log_space = log_space

    def __getitem__(self, b: int | None) -> Any:
        """The value of byte ``b`` (0-255), EOT (``None`` or 256) or EOS (257)."""
        if b is None:
            return self.ps[EOT]
        if not 0 <= b <= EOS:
            raise InvalidByteError(
                f"Invalid index: {b}. Must be between 0 and 257, or None for EOT."
            )
        return self.ps[b]

    def materialize(self) -> Any:
        """The distribution as a [`Chart`][genlm_bytelm.Chart]: keys 0-255, None (EOT), 257."""
        from genlm_bytelm.chart import Chart

        chart = Chart(-np.inf if self.log_space else 0)
        values = self.ps.tolist() if hasattr(self.ps, "tolist") else list(self.ps)
        chart.update(zip(range(256), values[:256], strict=True))
        chart[None] = values[EOT]
        chart[EOS] = values[EOS]
        return chart

    def pretty(self) -> Any:
        """[`materialize`][] keyed by one-byte ``bytes``, ``"EOT"`` and ``"EOS"``."""
        return self.materialize().map_keys(
            lambda x: bytes([x]) if isinstance(x, int) and 0 <= x <= 255 else _special(x)
        )

    def argmax(self) -> int | None:
        """The most likely outcome as ``materialize().argmax()`` gives it (first on ties)."""
        i = int(np.argmax(np.asarray(self.ps)))
        return None if i == EOT else i

    def __repr__(self) -> str:
        return f"LazyByteProbs(log_space={self.log_space}, argmax={self.argmax()!r})"


def _special(x: Any) -> str:
    return "EOS" if x == EOS else "EOT"


def logsumexp(arr: Iterable[float]) -> float:
    """``log(sum(exp(arr)))`` in float64, ``-inf`` if empty; a NaN raises ``NaNLogProbError``."""
    a = np.asarray(arr, dtype=np.float64)
    reject_nan(a, "logsumexp")
    a = a[a > -np.inf]
    if a.size == 0:
        return -np.inf
    m = a.max()
    return float(np.log(np.exp(a - m).sum()) + m)


def reject_nan(values: np.ndarray, where: str) -> None:
    """Raise [`NaNLogProbError`][] naming the first NaN entry of ``values``, if any."""
    nan = np.flatnonzero(np.isnan(values))
    if nan.size:
        raise NaNLogProbError(
            f"{where}: {nan.size} of {values.size} log-probabilities are NaN (first at "
            f"index {int(nan[0])}); a NaN cannot be normalised, and dropping it would "
            f"silently renormalise the rest. Find where it came from: the model's "
            f"log-probabilities (e.g. overflowing half-precision logits) or a weight "
            f"computed as inf - inf"
        )


def check_byte(a: Any) -> int:
    """``a`` as an int if it is a byte (0-255) or ``EOS``."""
    if not is_integer(a) or not (0 <= a <= 255 or a == EOS):
        raise InvalidByteError(
            f"a beam reads bytes 0-255 or EOS ({EOS}), got {a!r}; for text, feed "
            f"text.encode('utf-8') to prefill(), or its bytes one by one"
        )
    return int(a)


def next_byte_logps(states: list[Any], extended: list[Any]) -> LazyByteProbs:
    """The next-byte distribution over bytes and EOS; a token ends through ``extended`` only."""
    rows = np.empty((len(states) + len(extended), 258))
    for i, state in enumerate([*states, *extended]):
        rows[i] = state.logp_next.ps
        rows[i] += state.weight
    rows[: len(states), EOT] = -np.inf
    logps = _logsumexp_columns(rows)
    return LazyByteProbs(logps - logsumexp(logps))


def _logsumexp_columns(rows: np.ndarray) -> np.ndarray:
    """``log(sum(exp(rows), axis=0))``, -inf for all -inf columns."""
    top = rows.max(axis=0)
    shift = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(np.exp(rows - shift).sum(axis=0)) + shift

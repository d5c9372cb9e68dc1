"""The byte-level normalisers raise on NaN instead of dropping it (genlm-bytes drops it)."""

import math

import numpy as np
import pytest

from genlm_bytelm.byte_lm.pruning import certainly_dropped, decisions_unchanged
from genlm_bytelm.util import logsumexp
from genlm_core import bytes as genlm_bytes
from genlm_core.errors import GenlmError

NAN = float("nan")


def raises_nan_error(match):
    """``pytest.raises`` for the byte-level NaN error (a ValueError), by its public name."""
    return pytest.raises(ValueError, match=match)


def check_type(error):
    assert isinstance(error, genlm_bytes.NaNLogProbError) and isinstance(error, GenlmError)


def test_logsumexp_raises_naming_the_nan():
    with raises_nan_error("NaN") as info:
        logsumexp([0.0, -1.0, NAN, -math.inf, NAN])
    assert str(info.value).startswith(
        "logsumexp: 2 of 5 log-probabilities are NaN (first at index 2); a NaN cannot be "
        "normalised, and dropping it would silently renormalise the rest."
    )
    check_type(info.value)


def test_logsumexp_of_a_float32_vector_with_nan():
    logps = np.log(np.full(258, 1 / 258, dtype=np.float32))
    logps[257] = np.nan
    with raises_nan_error(r"1 of 258 log-probabilities are NaN \(first at index 257\)") as info:
        logsumexp(logps)
    check_type(info.value)


def test_logsumexp_without_nan_is_unchanged():
    assert logsumexp([]) == -math.inf
    assert logsumexp([-math.inf, -math.inf]) == -math.inf
    assert logsumexp([math.log(0.25), math.log(0.75), -math.inf]) == pytest.approx(0.0)


@pytest.mark.parametrize(
    "bounds, known",
    [([NAN], [0.0, -1.0]), ([-1.0], [0.0, NAN]), ([NAN, -2.0], [NAN])],
)
def test_certainly_dropped_raises_on_nan(bounds, known):
    with raises_nan_error("beam pruning") as info:
        certainly_dropped(bounds, known, k=2, log_threshold=math.log(0.01))
    check_type(info.value)


@pytest.mark.parametrize(
    "known, dropped, threshold",
    [
        ([0.0, NAN], [-5.0], math.log(0.01)),
        ([0.0, -1.0], [NAN], math.log(0.01)),
        ([0.0, NAN], [], math.log(0.01)),  # nothing dropped: the weights are still checked
        ([NAN], [-5.0], -math.inf),  # no threshold: likewise
    ],
)
def test_decisions_unchanged_raises_on_nan(known, dropped, threshold):
    with raises_nan_error("beam pruning") as info:
        decisions_unchanged(known, dropped, threshold)
    check_type(info.value)


def test_pruning_without_nan_is_unchanged():
    assert certainly_dropped([-10.0, -0.5], [0.0, -1.0], k=2, log_threshold=math.log(0.01)) == [
        True,
        False,
    ]
    assert decisions_unchanged([0.0, -1.0], [-20.0], math.log(0.01))

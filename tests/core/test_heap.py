"""HeapTrimmer: returns freed heap pages to the OS at a bounded rate."""

from __future__ import annotations

import sys

import pytest

from genlm_core import heap
from genlm_core.heap import HeapTrimmer, trim_heap

GLIBC = heap._MALLOC_TRIM is not None


def test_trim_heap_reports_support():
    assert trim_heap() is GLIBC
    if sys.platform.startswith("linux") and not GLIBC:
        pytest.skip("this Linux C library has no malloc_trim (not glibc)")


@pytest.mark.skipif(not GLIBC, reason="malloc_trim needs glibc")
def test_trims_at_most_once_per_interval(monkeypatch):
    calls = []
    monkeypatch.setattr(heap, "trim_heap", lambda: calls.append(1) or True)
    clock = iter([100.0, 100.1, 100.6, 100.7, 101.2])
    monkeypatch.setattr(heap.time, "monotonic", lambda: next(clock))
    trimmer = HeapTrimmer(interval=0.5)
    assert [trimmer.maybe_trim() for _ in range(5)] == [True, False, True, False, True]
    assert trimmer.trims == len(calls) == 3


@pytest.mark.skipif(not GLIBC, reason="malloc_trim needs glibc")
def test_interval_zero_trims_every_time():
    trimmer = HeapTrimmer(interval=0)
    assert all(trimmer.maybe_trim() for _ in range(3))
    assert trimmer.trims == 3


def test_disabled_never_trims(monkeypatch):
    monkeypatch.setattr(heap, "trim_heap", lambda: pytest.fail("trimmed while disabled"))
    trimmer = HeapTrimmer(enabled=False)
    assert not trimmer.maybe_trim()
    assert trimmer.trims == 0


@pytest.mark.parametrize("bad", [-1, "1", None, True])
def test_bad_interval_names_the_value(bad):
    message = rf"interval must be a number of seconds >= 0, got {bad!r}"
    with pytest.raises(ValueError, match=message):
        HeapTrimmer(interval=bad)

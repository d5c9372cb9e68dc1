"""HeapTrimmer: returns freed heap pages to the OS at a bounded rate."""

from __future__ import annotations

import sys

import pytest

from genlm_core.runtime import HeapTrimmer, trim_heap
from genlm_core.runtime import _heap as heap

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


def test_one_trimmer_for_the_whole_process(monkeypatch):
    from genlm_core.testing import ByteTokenizer, MockAsyncLM

    monkeypatch.delenv("GENLM_TRIM_HEAP", raising=False)
    tokenizer = ByteTokenizer()
    with MockAsyncLM(tokenizer, trim_heap=True) as a, MockAsyncLM(tokenizer, trim_heap=True) as b:
        assert a.heap_trimmer is b.heap_trimmer is heap.process_trimmer()


@pytest.mark.parametrize(
    "env, option, expected",
    [
        (None, None, False),  # the mock: no measured benefit, so off by default
        ("1", None, True),
        ("0", True, True),  # the constructor wins over the environment
        (None, False, False),
        ("off", None, False),
    ],
)
def test_the_switch(monkeypatch, env, option, expected):
    from genlm_core.testing import ByteTokenizer, MockAsyncLM

    if env is None:
        monkeypatch.delenv("GENLM_TRIM_HEAP", raising=False)
    else:
        monkeypatch.setenv("GENLM_TRIM_HEAP", env)
    with MockAsyncLM(ByteTokenizer(), trim_heap=option) as lm:
        assert lm.trims_heap is expected


def test_a_bad_environment_value_names_it(monkeypatch):
    from genlm_core.testing import ByteTokenizer, MockAsyncLM

    monkeypatch.setenv("GENLM_TRIM_HEAP", "maybe")
    with pytest.raises(ValueError, match="GENLM_TRIM_HEAP='maybe'"):
        MockAsyncLM(ByteTokenizer())


def test_a_model_that_does_not_trim_never_trims(monkeypatch):
    from genlm_core.testing import ByteTokenizer, MockAsyncLM

    monkeypatch.setattr(heap, "trim_heap", lambda: pytest.fail("trimmed though switched off"))
    with MockAsyncLM(ByteTokenizer(), trim_heap=False) as lm:
        lm.batch_next_token_logprobs_sync([[1], [2]])

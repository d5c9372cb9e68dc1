"""Batch trie outputs come from recycled memory, and no live output is ever reused."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from genlm_core.tokenization import Token
from genlm_core.trie import ParallelTokenCharacterTrie, TokenByteTrie, TokenCharacterTrie
from genlm_trie_numba._outputs import KEPT_SIZES, BatchOutputs

# gc.collect() here needs to see only what each test made (see conftest.young_gc).
pytestmark = pytest.mark.usefixtures("young_gc")

WORDS = [b"a", b"ab", b"abc", b"b", b"ba", b"c", b"cab", b"</s>"]


def make(kind):
    return kind([Token(i, w) for i, w in enumerate(WORDS)])


def address(masses) -> int:
    return masses.data_ptr() if hasattr(masses, "data_ptr") else masses.ctypes.data


def values(masses) -> np.ndarray:
    return masses.numpy() if hasattr(masses, "numpy") else masses


@pytest.mark.parametrize("kind", [TokenCharacterTrie, ParallelTokenCharacterTrie, TokenByteTrie])
def test_dropped_outputs_are_reused_and_live_ones_never(kind):
    trie = make(kind)
    rng = np.random.default_rng(0)
    ws = rng.random((4, len(WORDS))).astype(np.float32)
    first = trie.batch_weight_sum(ws)
    expected = values(first).copy()
    kept = address(first)
    second = trie.batch_weight_sum(rng.random((4, len(WORDS))).astype(np.float32))
    assert address(second) != kept  # ``first`` is still alive: its memory is not reused
    np.testing.assert_array_equal(values(first), expected)
    del first
    gc.collect()
    third = trie.batch_weight_max(ws)  # same batch size: the freed block comes back
    assert address(third) == kept
    np.testing.assert_array_equal(values(trie.batch_weight_sum(ws)), expected)


def test_views_keep_an_output_alive():
    trie = make(ParallelTokenCharacterTrie)
    ws = np.full((2, len(WORDS)), 0.5, dtype=np.float32)
    view = trie.batch_weight_sum(ws)[1:]  # the full output is dropped, a view remains
    before = view.copy()
    trie.batch_weight_sum(np.zeros_like(ws))
    np.testing.assert_array_equal(view, before)


def test_few_batch_sizes_are_kept():
    outputs = BatchOutputs(width=10, dtype=np.float32)
    held = {b: outputs.empty(b) for b in range(1, KEPT_SIZES + 3)}
    for b, out in held.items():
        assert out.shape == (b, 10) and out.dtype == np.float32 and out.flags.c_contiguous
        out[:] = b
    assert len(outputs._pools) == KEPT_SIZES  # older sizes' pools were closed
    for b, out in held.items():  # every output handed out is still valid
        assert (out == b).all()
    del held, out  # the loop variable too
    gc.collect()
    assert sum(p.stats().free_rows for p in outputs._pools.values()) == KEPT_SIZES
    outputs.release()
    assert sum(p.stats().free_rows for p in outputs._pools.values()) == 0

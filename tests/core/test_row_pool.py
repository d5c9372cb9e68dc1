"""RowPool: rows own their memory, and it is reused only once nothing can read it."""

from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
import pytest
import torch

from genlm_core.runtime import RowPool, StackPool

# gc.collect() here needs to see only what each test made (see conftest.young_gc).
pytestmark = pytest.mark.usefixtures("young_gc")


def batch(n: int, width: int = 16, start: float = 0.0) -> np.ndarray:
    return (np.arange(n * width, dtype=np.float32).reshape(n, width) + start).copy()


def test_rows_are_independent_float32_copies():
    pool = RowPool(16, max_free_bytes=1 << 20)
    values = batch(3)
    rows = pool.copy_rows(values)
    assert len(rows) == 3
    for row, expected in zip(rows, values, strict=True):
        assert row.dtype == torch.float32 and row.shape == (16,) and row.device.type == "cpu"
        assert row.untyped_storage().nbytes() == row.nbytes  # owns exactly one row
        np.testing.assert_array_equal(row.numpy(), expected)
    values[:] = -1  # a copy, not a view of the batch
    assert rows[0][1].item() == 1.0


def test_a_dropped_row_is_reused_and_rewritten():
    pool = RowPool(16, max_free_bytes=1 << 20)
    rows = pool.copy_rows(batch(2))
    del rows
    gc.collect()
    assert pool.stats().free_rows == 2
    again = pool.copy_rows(batch(2, start=100.0))
    stats = pool.stats()
    assert stats.reused == 2 and stats.allocated == 2 and stats.free_rows == 0
    np.testing.assert_array_equal(torch.stack(again).numpy(), batch(2, start=100.0))


def test_memory_still_readable_is_never_reused():
    pool = RowPool(16, max_free_bytes=1 << 20)
    kept, dropped = pool.copy_rows(batch(2))
    view = kept[4:8]  # a view shares the row's storage
    array = kept.numpy()  # so does a numpy array of it
    del kept
    del dropped
    gc.collect()
    assert pool.stats().free_rows == 1  # only the row nobody reads
    for _ in range(5):
        pool.copy_rows(batch(3, start=-50.0))
    np.testing.assert_array_equal(view.numpy(), np.arange(4, 8, dtype=np.float32))
    np.testing.assert_array_equal(array, np.arange(16, dtype=np.float32))
    assert pool.stats().live_rows >= 1
    del view
    gc.collect()
    assert pool.stats().live_rows >= 1  # the numpy array still holds it
    del array
    gc.collect()
    assert pool.stats().live_rows == 0


def test_empty_rows_are_filled_in_place_and_recycled():
    pool = RowPool(16, max_free_bytes=1 << 20)
    rows = pool.empty_rows(3)
    for i, row in enumerate(rows):
        assert row.shape == (16,) and row.dtype == torch.float32 and pool.owns(row)
        torch.log_softmax(torch.arange(16.0) * i, -1, out=row)
    torch.testing.assert_close(rows[2], torch.log_softmax(torch.arange(16.0) * 2, -1))
    del rows, row
    gc.collect()
    assert pool.empty_rows(0) == [] and len(pool.empty_rows(3)) == 3
    assert pool.stats().reused == 3
    with pytest.raises(ValueError, match="row count >= 0"):
        pool.empty_rows(-1)


def test_a_noted_maximum_is_the_rows_own_taken_once_and_never_carried_to_reuse():
    pool = RowPool(16, max_free_bytes=1 << 20)
    rows = pool.copy_rows(batch(2))  # copy_rows notes each row as it writes it
    assert pool.take_maxima(rows) == [15.0, 31.0]
    assert pool.take_maxima(rows) == [None, None]  # taken: a second check reads the row
    (row,) = pool.empty_rows(1)
    assert pool.take_maxima([row]) == [None]  # written, not noted
    row.fill_(-2.0)
    row[5] = float("nan")
    pool.note_maximum(row)
    (top,) = pool.take_maxima([row])
    assert top != top  # NaN is noted as NaN
    pool.note_maximum(row)
    address = row.data_ptr()
    del row  # its slot comes back last: the next row reuses it
    gc.collect()
    (again,) = pool.empty_rows(1)
    assert again.data_ptr() == address and pool.take_maxima([again]) == [None]
    outside = torch.zeros(16)
    pool.note_maximum(outside)  # not a row of this pool: ignored
    pool.note_maximum(again[:8])
    assert pool.take_maxima([outside, again[:8], again]) == [None, None, None]


def test_owns_only_whole_rows_it_handed_out():
    pool = RowPool(16, max_free_bytes=1 << 20)
    row = pool.copy_rows(batch(1))[0]
    assert pool.owns(row)
    assert not pool.owns(row[:8])  # same address, not the whole row
    assert not pool.owns(row.clone())
    assert not pool.owns(torch.zeros(16))


def test_free_rows_are_capped_by_bytes_or_a_function():
    row_bytes = 16 * 4
    pool = RowPool(16, max_free_bytes=2 * row_bytes)
    rows = pool.copy_rows(batch(5))
    del rows
    gc.collect()
    assert pool.stats().free_rows == 2 and pool.stats().free_bytes == 2 * row_bytes

    allowed = [3 * row_bytes]
    pool = RowPool(16, max_free_bytes=lambda: allowed[0])
    rows = pool.copy_rows(batch(5))
    del rows
    gc.collect()
    assert pool.stats().free_rows == 3
    allowed[0] = 0
    pool.copy_rows(batch(1))  # takes one free slot and gives it back: not kept now
    gc.collect()
    assert pool.stats().free_rows == 2


def test_release_and_close():
    pool = RowPool(16, max_free_bytes=1 << 20)
    del_me = pool.copy_rows(batch(2))
    live = pool.copy_rows(batch(1, start=7.0))[0]
    del del_me
    gc.collect()
    pool.release()
    assert pool.stats().free_rows == 0
    pool.close()
    assert live[0].item() == 7.0  # live rows stay valid
    del live
    gc.collect()
    assert pool.stats().free_rows == 0  # a closed pool keeps nothing


def test_rows_dropped_in_other_threads_come_back():
    pool = RowPool(16, max_free_bytes=1 << 20)
    rows = pool.copy_rows(batch(8))
    box = [rows]
    del rows
    t = threading.Thread(target=box.clear)
    t.start()
    t.join()
    gc.collect()
    assert pool.stats().free_rows == 8 and pool.stats().live_rows == 0


def test_copy_rows_takes_cpu_tensors():
    pool = RowPool(4, max_free_bytes=1 << 20, dtype=torch.float32)
    rows = pool.copy_rows(torch.ones(2, 4))
    assert torch.equal(torch.stack(rows), torch.ones(2, 4))


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (np.zeros((2, 5), np.float32), r"shape \(n, 4\)"),
        (np.zeros(4, np.float32), r"shape \(n, 4\)"),
        (np.zeros((2, 4), np.float64), "dtype float32"),
        ([[0.0] * 4], r"shape \(n, 4\)"),
    ],
)
def test_bad_batches_are_refused_with_the_fix(bad, message):
    pool = RowPool(4, max_free_bytes=0)
    with pytest.raises(ValueError, match=message):
        pool.copy_rows(bad)


@pytest.mark.parametrize("width", [0, -3, 2.5, True])
def test_bad_width(width):
    with pytest.raises(ValueError, match="width must be an integer >= 1"):
        RowPool(width, max_free_bytes=0)


@pytest.mark.parametrize("limit", [-1, 1.5, "big", None])
def test_bad_limit(limit):
    with pytest.raises(ValueError, match="max_free_bytes must be an integer >= 0"):
        RowPool(4, max_free_bytes=limit)


def test_slots_come_from_the_given_allocator():
    made = []

    def allocate(n):
        made.append(n)
        return np.full(n, 7.0, dtype=np.float32)

    pool = RowPool(4, max_free_bytes=1 << 20, allocate=allocate)
    (row,) = pool.empty_rows(1)
    assert made == [4] and row.tolist() == [7.0] * 4
    del row
    gc.collect()
    (again,) = pool.empty_rows(1)  # a recycled slot: the allocator is not asked again
    assert made == [4] and pool.stats().reused == 1


def test_large_rows_live_in_mappings_of_their_own_given_back_when_freed():
    """Off malloc's heap: cached rows there left holes between short-lived buffers."""
    import mmap

    width = 32_000  # 128 KB rows (Llama-2's vocabulary)
    pool = RowPool(width, max_free_bytes=width * 4)  # keeps one free slot
    rows = pool.copy_rows(batch(3, width))
    np.testing.assert_array_equal(torch.stack(rows).numpy(), batch(3, width))
    slots = [pool._live[row.data_ptr()].slot for row in rows]
    assert all(isinstance(slot.base.obj, mmap.mmap) for slot in slots)
    mappings = [weakref.ref(slot.base.obj) for slot in slots]
    del rows, slots
    gc.collect()
    assert pool.stats().free_rows == 1 and sum(m() is None for m in mappings) == 2
    small = RowPool(16, max_free_bytes=0)
    (row,) = small.empty_rows(1)
    assert small._live[row.data_ptr()].slot.base is None  # small rows: malloc's (np.empty)


# -- StackPool: batch calls' results in recycled memory ---------------------------------


def rows_of(n: int, width: int = 16, start: float = 0.0) -> list[torch.Tensor]:
    return list(torch.from_numpy(batch(n, width, start)))


def test_a_stack_equals_torch_stack_and_reuses_its_memory_once_dropped():
    pool = StackPool(max_free_bytes=1 << 20)
    plain = pool.stack(rows_of(3, start=5.0))  # a new shape: stacked as usual, remembered
    assert torch.equal(plain, torch.stack(rows_of(3, start=5.0))) and (3, 16) in pool._pools
    first = pool.stack(rows_of(3))  # asked for again: pooled
    assert torch.equal(first, torch.stack(rows_of(3))) and first.shape == (3, 16)
    address = first.data_ptr()
    held = pool.stack(rows_of(3, start=100.0))  # the first is alive: new memory
    assert held.data_ptr() != address
    del first
    gc.collect()
    again = pool.stack(rows_of(3, start=-7.0))
    assert again.data_ptr() == address and pool._pools[(3, 16)].stats().reused == 1
    assert torch.equal(again, torch.stack(rows_of(3, start=-7.0)))  # rewritten
    assert torch.equal(held, torch.stack(rows_of(3, start=100.0)))  # untouched


def test_a_stack_still_read_through_a_view_is_never_reused():
    pool = StackPool(max_free_bytes=1 << 20)
    pool.stack(rows_of(2))  # (the shape's first stack is not pooled)
    result = pool.stack(rows_of(2))
    view, array = result[1], result.numpy()
    address = result.data_ptr()
    del result
    gc.collect()
    for k in range(4):
        assert pool.stack(rows_of(2, start=50.0 + k)).data_ptr() != address
    np.testing.assert_array_equal(view.numpy(), batch(2)[1])
    np.testing.assert_array_equal(array, batch(2))


def test_only_the_latest_shapes_keep_memory_and_at_most_one_result_each():
    pool = StackPool(max_free_bytes=1 << 20, sizes=2)
    for n in (1, 2, 3):
        pool.stack(rows_of(n))
    gc.collect()
    assert sorted(pool._pools) == [(2, 16), (3, 16)]  # the oldest shape was let go
    results = [pool.stack(rows_of(3)) for _ in range(3)]  # pooled, all three
    del results
    gc.collect()
    assert pool._pools[(3, 16)].stats().free_rows == 1  # one kept of three


def test_a_budget_too_small_keeps_nothing():
    pool = StackPool(max_free_bytes=100)  # a (2, 16) result is 128 bytes
    for k in range(3):
        assert torch.equal(pool.stack(rows_of(2, start=k)), torch.stack(rows_of(2, start=k)))
    gc.collect()
    stats = pool._pools[(2, 16)].stats()
    assert stats.free_rows == 0 and stats.reused == 0 and stats.allocated == 2


@pytest.mark.parametrize(
    "rows",
    [
        [torch.ones(4, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)],
        [torch.ones(2, 3), torch.zeros(2, 3)],  # 2-D rows
        [torch.ones(4), torch.zeros(4, dtype=torch.float64)],  # a dtype apart
    ],
)
def test_other_rows_are_stacked_as_torch_stack_does(rows):
    pool = StackPool(max_free_bytes=1 << 20)
    result = pool.stack(rows)
    assert torch.equal(result, torch.stack(rows)) and result.dtype == torch.stack(rows).dtype


def test_rows_that_cannot_stack_raise_as_torch_stack_does_and_close_keeps_nothing():
    pool = StackPool(max_free_bytes=1 << 20)
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        pool.stack([torch.ones(4), torch.ones(5)])
    kept = pool.stack(rows_of(2))
    pool.close()
    assert torch.equal(kept, torch.stack(rows_of(2)))  # still valid
    after = pool.stack(rows_of(2))
    del kept
    gc.collect()
    assert pool._pools == {} and torch.equal(after, torch.stack(rows_of(2)))


@pytest.mark.parametrize("kw", [{"max_free_bytes": -1}, {"max_free_bytes": 1.5}, {"sizes": 0}])
def test_stack_pool_arguments_are_checked_naming_the_value(kw):
    args = {"max_free_bytes": 1 << 20, **kw}
    with pytest.raises(ValueError, match=f"{next(iter(kw))}={next(iter(kw.values()))!r}"):
        StackPool(**args)

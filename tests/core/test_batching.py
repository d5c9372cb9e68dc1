"""AutoBatcher: one test per scheduling rule (policy, threads, dedup, cancellation, failures).

Ordering is made deterministic with asyncio's FIFO ready queue (``sleep(0)`` = one
loop pass) and with threading events that hold a batch inside ``batch_fn``. The
``within`` guard only turns a hang into a failure; nothing asserts on timing.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import numpy as np
import pytest
from batching_kit import GUARD, Recorder, passes, within

from genlm_core.errors import (
    BatchSizeMismatchError,
    GenlmError,
)
from genlm_core.runtime import AutoBatcher, BatcherStats


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


# -- construction ------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -3, 1.5, True, "8", None])
async def test_max_batch_size_is_validated(bad: Any) -> None:
    with pytest.raises(ValueError, match=rf"max_batch_size must be an integer >= 1, got {bad!r}"):
        AutoBatcher(lambda keys: keys, max_batch_size=bad)


async def test_max_batch_size_message_matches_ray_style() -> None:
    with pytest.raises(ValueError) as info:
        AutoBatcher(lambda keys: keys, max_batch_size=0)
    assert str(info.value) == "max_batch_size must be an integer >= 1, got 0"


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf"), "0.1", True])
async def test_max_wait_is_validated(bad: Any) -> None:
    with pytest.raises(ValueError, match="max_wait must be a finite number of seconds >= 0"):
        AutoBatcher(lambda keys: keys, max_wait=bad)


async def test_batch_fn_must_be_callable() -> None:
    with pytest.raises(ValueError, match="batch_fn must be callable"):
        AutoBatcher(42)  # type: ignore[arg-type]


# -- batching policy -----------------------------------------------------------------------


async def test_gathered_burst_forms_one_batch_with_results_in_order(rec: Recorder) -> None:
    batcher = AutoBatcher(rec)
    results = await within(asyncio.gather(*(batcher.submit(k) for k in range(10))))
    assert results == [("r", k) for k in range(10)]
    assert rec.batches == [list(range(10))]
    await within(batcher.aclose())


async def test_lone_caller_does_not_wait_for_max_wait(rec: Recorder) -> None:
    # adaptive: the deadline is only a cap; a pass with no new key dispatches.
    batcher = AutoBatcher(rec, max_wait=3600)
    assert await within(batcher.submit("a")) == ("r", "a")
    assert rec.batches == [["a"]]
    await within(batcher.aclose())


async def test_adaptive_keeps_the_batch_open_while_each_pass_adds_keys(rec: Recorder) -> None:
    batcher = AutoBatcher(rec, max_wait=3600)

    async def caller(k: int) -> Any:
        await passes(k)  # caller k arrives k passes after the first
        return await batcher.submit(k)

    results = await within(asyncio.gather(*(caller(k) for k in range(5))))
    assert results == [("r", k) for k in range(5)]
    assert rec.batches == [[0, 1, 2, 3, 4]]
    await within(batcher.aclose())


async def test_adaptive_dispatches_once_a_pass_adds_nothing(rec: Recorder) -> None:
    batcher = AutoBatcher(rec, max_wait=3600)

    async def late() -> Any:
        await passes(3)  # two quiet passes after "a": its batch is gone by then
        return await batcher.submit("b")

    assert await within(asyncio.gather(batcher.submit("a"), late())) == [("r", "a"), ("r", "b")]
    assert rec.batches == [["a"], ["b"]]
    await within(batcher.aclose())


async def test_non_adaptive_waits_across_passes_and_dispatches_early_when_full(
    rec: Recorder,
) -> None:
    batcher = AutoBatcher(rec, max_batch_size=2, max_wait=3600, adaptive=False)
    first = asyncio.ensure_future(batcher.submit("a"))
    await passes(10)
    assert rec.batches == []  # nothing dispatched: not full, deadline far away
    second = asyncio.ensure_future(batcher.submit("b"))
    assert await within(asyncio.gather(first, second)) == [("r", "a"), ("r", "b")]
    assert rec.batches == [["a", "b"]]
    await within(batcher.aclose())


async def test_non_adaptive_zero_wait_dispatches_what_one_pass_queued(rec: Recorder) -> None:
    batcher = AutoBatcher(rec, adaptive=False)
    results = await within(asyncio.gather(*(batcher.submit(k) for k in "xyz")))
    assert results == [("r", k) for k in "xyz"]
    assert rec.batches == [["x", "y", "z"]]
    await within(batcher.aclose())


async def test_max_batch_size_splits_a_burst_in_order(rec: Recorder) -> None:
    batcher = AutoBatcher(rec, max_batch_size=3)
    results = await within(asyncio.gather(*(batcher.submit(k) for k in range(7))))
    assert results == [("r", k) for k in range(7)]
    assert rec.batches == [[0, 1, 2], [3, 4, 5], [6]]
    assert batcher.stats.max_batch_seen == 3
    await within(batcher.aclose())


async def test_deadline_counts_from_first_request_never_a_debounce(rec: Recorder) -> None:
    # A trickle of new keys, each arriving well inside max_wait of the previous one,
    # would postpone a debounced batch forever; a deadline dispatches "first" anyway.
    batcher = AutoBatcher(rec, max_wait=0.2, adaptive=False)
    first = asyncio.ensure_future(batcher.submit("first"))
    stop = asyncio.Event()
    trickled: list[asyncio.Future[Any]] = []

    async def trickle() -> None:
        i = 0
        while not stop.is_set():
            trickled.append(asyncio.ensure_future(batcher.submit(i)))
            i += 1
            await asyncio.sleep(0.01)

    trickler = asyncio.ensure_future(trickle())
    assert await within(first) == ("r", "first")
    assert not trickler.done()  # the trickle was still going when the batch left
    stop.set()
    await within(trickler)
    await within(asyncio.gather(*trickled))
    assert rec.batches[0][0] == "first"
    await within(batcher.aclose())


async def test_requests_queue_during_compute_and_go_when_the_worker_is_free(
    rec: Recorder,
) -> None:
    rec.hold(0)
    batcher = AutoBatcher(rec, max_wait=3600)
    a = asyncio.ensure_future(batcher.submit("a"))
    await rec.started(0)
    b = asyncio.ensure_future(batcher.submit("b"))
    c = asyncio.ensure_future(batcher.submit("c"))
    await passes(5)
    assert rec.batches == [["a"]]  # b and c wait in the queue
    rec.release(0)
    assert await within(asyncio.gather(a, b, c)) == [("r", "a"), ("r", "b"), ("r", "c")]
    assert rec.batches == [["a"], ["b", "c"]]
    await within(batcher.aclose())


async def test_a_full_batch_is_queued_behind_the_running_one_a_partial_one_waits(
    rec: Recorder,
) -> None:
    rec.hold(0)
    batcher = AutoBatcher(rec, max_batch_size=2)
    running = [asyncio.ensure_future(batcher.submit(k)) for k in "ab"]
    await rec.started(0)
    full = [asyncio.ensure_future(batcher.submit(k)) for k in "cd"]
    await passes(3)
    assert batcher.stats.batches == 2  # [c, d] cannot grow: already handed to the thread
    partial = asyncio.ensure_future(batcher.submit("e"))
    await passes(3)
    assert batcher.stats.batches == 2  # [e] may still grow: it waits for the thread
    rec.release(0)
    results = await within(asyncio.gather(*running, *full, partial))
    assert results == [("r", k) for k in "abcde"]
    assert rec.batches == [["a", "b"], ["c", "d"], ["e"]]
    await within(batcher.aclose())


# -- where batch_fn runs ---------------------------------------------------------------------


async def test_batch_fn_runs_in_one_dedicated_thread_shut_down_on_close(rec: Recorder) -> None:
    batcher = AutoBatcher(rec, name="my-batcher", inline_below=0)  # (cheap ones: *_inline.py)
    await within(batcher.submit(1))
    await within(batcher.submit(2))
    assert len(rec.threads) == 2
    thread = rec.threads[0]
    assert rec.threads[1] is thread
    assert thread is not threading.current_thread()
    assert thread.name.startswith("my-batcher")
    await within(batcher.aclose())
    thread.join(GUARD)
    assert not thread.is_alive()


async def test_event_loop_keeps_running_while_batch_fn_computes(rec: Recorder) -> None:
    rec.hold(0)
    batcher = AutoBatcher(rec)
    fut = asyncio.ensure_future(batcher.submit("a"))
    await rec.started(0)  # batch_fn is blocked, and yet this coroutine runs
    await passes(3)
    assert not fut.done()
    rec.release(0)
    assert await within(fut) == ("r", "a")
    await within(batcher.aclose())


async def test_tensor_like_results_are_split_per_key() -> None:
    batcher = AutoBatcher(lambda keys: np.arange(len(keys) * 2).reshape(len(keys), 2))
    rows = await within(asyncio.gather(*(batcher.submit(k) for k in "abc")))
    assert [r.tolist() for r in rows] == [[0, 1], [2, 3], [4, 5]]
    await within(batcher.aclose())


# -- deduplication ---------------------------------------------------------------------------


async def test_identical_pending_keys_are_computed_once(rec: Recorder) -> None:
    batcher = AutoBatcher(rec)
    keys = ["x", "y", "x", "x", "y", "z"]
    results = await within(asyncio.gather(*(batcher.submit(k) for k in keys)))
    assert results == [("r", k) for k in keys]
    assert rec.batches == [["x", "y", "z"]]
    assert batcher.stats == BatcherStats(
        requests=6, batches=1, deduplicated=3, max_batch_seen=3, errors=0
    )
    await within(batcher.aclose())


async def test_request_for_an_in_flight_key_attaches_to_it(rec: Recorder) -> None:
    rec.hold(0)
    batcher = AutoBatcher(rec)
    first = asyncio.ensure_future(batcher.submit("k"))
    await rec.started(0)
    second = asyncio.ensure_future(batcher.submit("k"))
    await passes(3)
    rec.release(0)
    assert await within(asyncio.gather(first, second)) == [("r", "k"), ("r", "k")]
    assert rec.batches == [["k"]]
    assert batcher.stats.deduplicated == 1
    await within(batcher.aclose())


async def test_key_is_computed_again_once_its_batch_finished(rec: Recorder) -> None:
    batcher = AutoBatcher(rec)
    await within(batcher.submit("k"))
    await within(batcher.submit("k"))
    assert rec.batches == [["k"], ["k"]]  # no result caching: that is OutputCache's job
    await within(batcher.aclose())


# -- cancellation ------------------------------------------------------------------------------


async def test_key_whose_callers_all_cancelled_is_not_computed(rec: Recorder) -> None:
    rec.hold(0)
    batcher = AutoBatcher(rec)
    blocker = asyncio.ensure_future(batcher.submit("blocker"))
    await rec.started(0)
    b1 = asyncio.ensure_future(batcher.submit("b"))
    b2 = asyncio.ensure_future(batcher.submit("b"))
    c = asyncio.ensure_future(batcher.submit("c"))
    await passes(2)
    b1.cancel()
    b2.cancel()
    rec.release(0)
    assert await within(asyncio.gather(blocker, c)) == [("r", "blocker"), ("r", "c")]
    assert rec.batches == [["blocker"], ["c"]]
    assert b1.cancelled() and b2.cancelled()
    await within(batcher.aclose())


async def test_cancelling_one_waiter_of_a_pending_key_keeps_it_for_the_others(
    rec: Recorder,
) -> None:
    rec.hold(0)
    batcher = AutoBatcher(rec)
    blocker = asyncio.ensure_future(batcher.submit("blocker"))
    await rec.started(0)
    gone = asyncio.ensure_future(batcher.submit("k"))
    stays = asyncio.ensure_future(batcher.submit("k"))
    await passes(2)
    gone.cancel()
    rec.release(0)
    assert await within(stays) == ("r", "k")
    await within(blocker)
    assert gone.cancelled()
    assert rec.batches == [["blocker"], ["k"]]
    await within(batcher.aclose())


async def test_cancelling_while_in_flight_does_not_disturb_other_waiters(rec: Recorder) -> None:
    rec.hold(0)
    batcher = AutoBatcher(rec)
    gone = asyncio.ensure_future(batcher.submit("k"))
    stays = asyncio.ensure_future(batcher.submit("k"))
    other = asyncio.ensure_future(batcher.submit("j"))
    await rec.started(0)
    gone.cancel()
    await passes(2)
    rec.release(0)
    assert await within(asyncio.gather(stays, other)) == [("r", "k"), ("r", "j")]
    assert gone.cancelled()
    assert await within(batcher.submit("next")) == ("r", "next")  # and the worker lives
    await within(batcher.aclose())


# -- failures ------------------------------------------------------------------------------------


async def test_exception_reaches_every_caller_of_the_batch_and_the_next_batch_works() -> None:
    def fn(keys: list[Any]) -> list[Any]:
        if "bad" in keys:
            raise ValueError(f"boom on {keys}")
        return [k * 2 for k in keys]

    batcher = AutoBatcher(fn)
    outcomes = await within(
        asyncio.gather(*(batcher.submit(k) for k in ["bad", "ok", "bad"]), return_exceptions=True)
    )
    assert all(isinstance(o, ValueError) for o in outcomes)
    assert "boom on ['bad', 'ok']" in str(outcomes[0])
    assert await within(batcher.submit("ok")) == "okok"
    assert batcher.stats.errors == 1
    assert batcher.stats.batches == 2
    await within(batcher.aclose())


async def test_wrong_result_count_raises_batch_size_mismatch_for_every_caller() -> None:
    calls: list[list[Any]] = []

    def fn(keys: list[Any]) -> list[Any]:
        calls.append(keys)
        return keys[:-1] if len(calls) == 1 else keys

    batcher = AutoBatcher(fn)
    outcomes = await within(
        asyncio.gather(*(batcher.submit(k) for k in "abc"), return_exceptions=True)
    )
    assert all(isinstance(o, BatchSizeMismatchError) for o in outcomes)
    err = outcomes[0]
    assert isinstance(err, GenlmError) and isinstance(err, RuntimeError)
    assert "batch_fn returned 2 results for 3 keys" in str(err)
    assert await within(batcher.submit("d")) == "d"
    await within(batcher.aclose())


async def test_base_exception_in_batch_fn_fails_the_batch_not_the_worker() -> None:
    def fn(keys: list[Any]) -> list[Any]:
        if keys == ["interrupt"]:
            raise KeyboardInterrupt
        return keys

    batcher = AutoBatcher(fn)
    with pytest.raises(RuntimeError, match="interrupted by KeyboardInterrupt"):
        await within(batcher.submit("interrupt"))
    assert await within(batcher.submit("fine")) == "fine"
    await within(batcher.aclose())


# -- submit_many ----------------------------------------------------------------------------------


async def test_submit_many_returns_results_in_order_and_dedupes(rec: Recorder) -> None:
    batcher = AutoBatcher(rec, max_batch_size=3)
    results = await within(batcher.submit_many(["a", "b", "a", "c", "d"]))
    assert results == [("r", k) for k in ["a", "b", "a", "c", "d"]]
    assert rec.batches == [["a", "b", "c"], ["d"]]
    assert await within(batcher.submit_many([])) == []
    await within(batcher.aclose())


async def test_submit_many_shares_a_batch_with_concurrent_submits(rec: Recorder) -> None:
    batcher = AutoBatcher(rec)
    many, one = await within(asyncio.gather(batcher.submit_many([1, 2]), batcher.submit(3)))
    assert many == [("r", 1), ("r", 2)] and one == ("r", 3)
    assert rec.batches == [[1, 2, 3]]
    await within(batcher.aclose())


async def test_cancelled_submit_many_drops_its_keys(rec: Recorder) -> None:
    rec.hold(0)
    batcher = AutoBatcher(rec)
    blocker = asyncio.ensure_future(batcher.submit("blocker"))
    await rec.started(0)
    many = asyncio.ensure_future(batcher.submit_many(["x", "y"]))
    await passes(2)
    many.cancel()
    await passes(2)
    rec.release(0)
    await within(blocker)
    assert await within(batcher.submit("after")) == ("r", "after")
    assert rec.batches == [["blocker"], ["after"]]
    await within(batcher.aclose())


async def test_submit_many_failure_reaches_the_caller() -> None:
    def fn(keys: list[Any]) -> list[Any]:
        raise LookupError("no such thing")

    batcher = AutoBatcher(fn, max_batch_size=1)
    with pytest.raises(LookupError, match="no such thing"):
        await within(batcher.submit_many(["a", "b"]))
    await within(batcher.aclose())

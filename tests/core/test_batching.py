"""AutoBatcher: one deterministic test per scheduling rule.

Ordering is made deterministic with asyncio's FIFO ready queue (``sleep(0)`` = one
loop pass) and with threading events that hold a batch inside ``batch_fn``. The
``within`` guard only turns a hang into a failure; nothing asserts on timing.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from genlm_core.errors import (
    BatcherClosedError,
    BatcherLoopError,
    BatchSizeMismatchError,
    GenlmError,
    WorkerInitError,
)
from genlm_core.runtime import AutoBatcher, BatcherStats, WorkerThread

T = TypeVar("T")
GUARD = 30.0  # seconds before a hang is reported as a failure


async def within(aw: Awaitable[T]) -> T:
    return await asyncio.wait_for(aw, GUARD)


async def passes(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


class Recorder:
    """A batch_fn that records its batches; ``hold(i)`` makes batch i wait for ``release``."""

    def __init__(self, fn: Any = None) -> None:
        self.fn = fn or (lambda keys: [("r", k) for k in keys])
        self.batches: list[list[Any]] = []
        self.threads: list[threading.Thread] = []
        self._started: dict[int, threading.Event] = {}
        self._gates: dict[int, threading.Event] = {}

    def hold(self, i: int) -> None:
        self._started[i] = threading.Event()
        self._gates[i] = threading.Event()

    async def started(self, i: int) -> None:
        assert await asyncio.to_thread(self._started[i].wait, GUARD), f"batch {i} never started"

    def release(self, i: int) -> None:
        self._gates[i].set()

    def __call__(self, keys: list[Any]) -> Any:
        i = len(self.batches)
        self.batches.append(list(keys))
        self.threads.append(threading.current_thread())
        if i in self._gates:
            self._started[i].set()
            self._gates[i].wait(GUARD)
        return self.fn(keys)


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


# -- construction ------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -3, 1.5, True, "8", None])
def test_max_batch_size_is_validated(bad: Any) -> None:
    with pytest.raises(ValueError, match=rf"max_batch_size must be an integer >= 1, got {bad!r}"):
        AutoBatcher(lambda keys: keys, max_batch_size=bad)


def test_max_batch_size_message_matches_ray_style() -> None:
    with pytest.raises(ValueError) as info:
        AutoBatcher(lambda keys: keys, max_batch_size=0)
    assert str(info.value) == "max_batch_size must be an integer >= 1, got 0"


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf"), "0.1", True])
def test_max_wait_is_validated(bad: Any) -> None:
    with pytest.raises(ValueError, match="max_wait must be a finite number of seconds >= 0"):
        AutoBatcher(lambda keys: keys, max_wait=bad)


def test_batch_fn_must_be_callable() -> None:
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
    batcher = AutoBatcher(rec, name="my-batcher")
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


# -- event-loop binding -------------------------------------------------------------------------


def shut_down(loop: asyncio.AbstractEventLoop) -> None:
    """Close a loop the way asyncio.run does: cancel its tasks first."""
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:  # an idle batcher has no task left on the loop
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.close()


def test_use_from_another_event_loop_raises_naming_both() -> None:
    batcher = AutoBatcher(lambda keys: keys, name="bound")
    first = asyncio.new_event_loop()
    second = asyncio.new_event_loop()
    try:
        assert first.run_until_complete(batcher.submit(1)) == 1
        with pytest.raises(BatcherLoopError) as info:
            second.run_until_complete(batcher.submit(2))
        err = info.value
        assert isinstance(err, GenlmError) and isinstance(err, RuntimeError)
        assert repr(first) in str(err) and repr(second) in str(err)
        assert "bound" in str(err)
        shut_down(first)  # a closed loop can never run again: the batcher may move on
        assert second.run_until_complete(batcher.submit(3)) == 3
        second.run_until_complete(batcher.aclose())
    finally:
        first.close()
        second.close()


def test_reusable_across_asyncio_run_calls() -> None:
    batcher = AutoBatcher(lambda keys: keys)
    assert asyncio.run(batcher.submit("a")) == "a"
    assert asyncio.run(batcher.submit("b")) == "b"
    batcher.close()
    assert batcher.closed


# -- closing -------------------------------------------------------------------------------------


async def test_aclose_fails_queued_delivers_in_flight_and_refuses_new(rec: Recorder) -> None:
    rec.hold(0)
    batcher = AutoBatcher(rec)
    in_flight = asyncio.ensure_future(batcher.submit("a"))
    await rec.started(0)
    queued = asyncio.ensure_future(batcher.submit("b"))
    await passes(2)
    closing = asyncio.ensure_future(batcher.aclose())
    with pytest.raises(BatcherClosedError, match="is closed"):
        await within(queued)
    assert batcher.closed
    await passes(5)
    assert not closing.done()  # aclose waits for the in-flight batch
    rec.release(0)
    assert await within(in_flight) == ("r", "a")
    await within(closing)
    with pytest.raises(BatcherClosedError):
        await batcher.submit("c")
    with pytest.raises(BatcherClosedError):
        await batcher.submit_many(["c"])
    assert rec.batches == [["a"]]
    rec.threads[0].join(GUARD)
    assert not rec.threads[0].is_alive()
    await within(batcher.aclose())  # idempotent


async def test_close_from_another_thread_fails_queued_requests(rec: Recorder) -> None:
    rec.hold(0)
    batcher = AutoBatcher(rec)
    in_flight = asyncio.ensure_future(batcher.submit("a"))
    await rec.started(0)
    queued = asyncio.ensure_future(batcher.submit("b"))
    await passes(2)
    await asyncio.to_thread(batcher.close)
    with pytest.raises(BatcherClosedError):
        await within(queued)
    rec.release(0)
    assert await within(in_flight) == ("r", "a")
    batcher.close()  # idempotent
    assert rec.batches == [["a"]]


async def test_close_on_the_loop_thread_without_awaiting(rec: Recorder) -> None:
    batcher = AutoBatcher(rec, max_wait=3600, adaptive=False)
    queued = asyncio.ensure_future(batcher.submit("q"))
    await passes(2)
    batcher.close()
    with pytest.raises(BatcherClosedError):
        await within(queued)
    assert rec.batches == []


async def test_closing_an_unused_batcher() -> None:
    batcher = AutoBatcher(lambda keys: keys)
    await within(batcher.aclose())
    batcher.close()
    assert batcher.closed
    with pytest.raises(BatcherClosedError):
        await batcher.submit(1)


def test_close_after_the_event_loop_is_gone() -> None:
    batcher = AutoBatcher(lambda keys: keys)
    assert asyncio.run(batcher.submit(1)) == 1
    batcher.close()
    assert batcher.closed


async def test_worker_cancelled_with_its_loop_fails_waiters_and_restarts() -> None:
    rec = Recorder()
    rec.hold(0)
    batcher = AutoBatcher(rec)
    waiter = asyncio.ensure_future(batcher.submit("a"))
    await rec.started(0)
    worker = batcher._worker  # what asyncio.run's shutdown would cancel
    assert worker is not None
    worker.cancel()
    with pytest.raises(BatcherClosedError, match="worker was cancelled"):
        await within(waiter)
    rec.release(0)
    assert await within(batcher.submit("b")) == ("r", "b")  # a new worker serves on
    await within(batcher.aclose())


# -- everything at once -------------------------------------------------------------------------

request = st.tuples(
    st.integers(0, 5),  # key; 5 makes its whole batch fail
    st.integers(0, 3),  # loop passes before submitting
    st.none() | st.integers(0, 3),  # cancel after this many passes
)


@given(
    callers=st.lists(st.lists(request, min_size=1, max_size=4), min_size=1, max_size=10),
    max_batch_size=st.integers(1, 4),
    adaptive=st.booleans(),
)
def test_random_traffic_keeps_every_rule(
    callers: list[list[tuple[int, int, int | None]]], max_batch_size: int, adaptive: bool
) -> None:
    batches: list[list[int]] = []

    def fn(keys: list[int]) -> list[int]:
        batches.append(list(keys))
        if 5 in keys:
            raise ValueError("boom")
        return [k * 10 for k in keys]

    async def caller(batcher: AutoBatcher[int, int], requests: list[Any]) -> None:
        for key, delay, cancel_after in requests:
            await passes(delay)
            task = asyncio.ensure_future(batcher.submit(key))
            if cancel_after is not None:
                await passes(cancel_after)
                task.cancel()
            try:
                result = await task
            except asyncio.CancelledError:
                assert cancel_after is not None
            except ValueError as exc:
                assert str(exc) == "boom"
                assert any(key in b and 5 in b for b in batches)
            else:
                assert key != 5 and result == key * 10

    async def main() -> None:
        batcher = AutoBatcher(fn, max_batch_size=max_batch_size, adaptive=adaptive)
        await within(asyncio.gather(*(caller(batcher, reqs) for reqs in callers)))
        await within(batcher.aclose())

    asyncio.run(main())
    for batch in batches:
        assert 1 <= len(batch) <= max_batch_size
        assert len(set(batch)) == len(batch)


def test_repr_names_the_batcher() -> None:
    batcher = AutoBatcher(lambda keys: keys, name="lm.batcher", max_batch_size=8)
    assert "lm.batcher" in repr(batcher) and "max_batch_size=8" in repr(batcher)


# -- worker-thread initializer -----------------------------------------------------------


async def test_thread_initializer_runs_once_in_the_worker_before_the_first_batch(
    rec: Recorder,
) -> None:
    seen: list[tuple[threading.Thread, int]] = []
    worker = WorkerThread(
        "init", lambda: seen.append((threading.current_thread(), len(rec.batches)))
    )
    b = AutoBatcher(rec, worker_thread=worker)
    assert await within(b.submit(1)) == ("r", 1)
    assert await within(asyncio.gather(b.submit(2), b.submit(3))) == [("r", 2), ("r", 3)]
    await b.aclose()
    worker.shutdown()
    assert len(seen) == 1
    thread, batches_before = seen[0]
    assert batches_before == 0
    assert thread is rec.threads[0] is rec.threads[-1]
    assert thread is not threading.current_thread()


async def test_failing_thread_initializer_fails_each_batch_with_the_reason(rec: Recorder) -> None:
    def boom() -> None:
        raise OSError("no such library")

    worker = WorkerThread("demo", boom)
    b = AutoBatcher(rec, worker_thread=worker)
    for key in (1, 2):  # every batch fails the same way; none hangs, none runs
        with pytest.raises(WorkerInitError, match="demo.*OSError: no such library") as info:
            await within(b.submit(key))
        assert isinstance(info.value.__cause__, OSError)
    assert rec.batches == []
    await b.aclose()
    worker.shutdown()


def test_thread_initializer_must_be_callable() -> None:
    with pytest.raises(ValueError, match="initializer must be callable"):
        WorkerThread("w", initializer=42)  # type: ignore[arg-type]


# -- a worker thread shared between batchers ----------------------------------------------


def test_a_shared_worker_thread_serves_batchers_of_successive_loops(rec: Recorder) -> None:
    inits: list[threading.Thread] = []
    worker = WorkerThread("shared", lambda: inits.append(threading.current_thread()))
    for key in (1, 2, 3):  # one asyncio.run after another, a batcher each

        async def run(key: int = key) -> Any:
            b = AutoBatcher(rec, worker_thread=worker)
            out = await within(b.submit(key))
            await b.aclose()  # closing a batcher leaves the shared thread running
            return out

        assert asyncio.run(run()) == ("r", key)
    assert len(set(rec.threads)) == 1 and inits == [rec.threads[0]]
    assert worker.thread.is_alive() and not worker.closed
    worker.shutdown()
    worker.shutdown()  # idempotent
    worker.thread.join(GUARD)
    assert not worker.thread.is_alive()


async def test_a_shut_down_worker_thread_fails_batches_instead_of_hanging(rec: Recorder) -> None:
    worker = WorkerThread("gone")
    worker.shutdown()
    b = AutoBatcher(rec, worker_thread=worker)
    with pytest.raises(BatcherClosedError, match="worker thread 'gone' was shut down"):
        await within(b.submit(1))
    assert rec.batches == []
    await b.aclose()


def test_worker_thread_must_be_a_worker_thread() -> None:
    with pytest.raises(ValueError, match="worker_thread must be a WorkerThread"):
        AutoBatcher(lambda keys: keys, worker_thread=object())  # type: ignore[arg-type]


def test_a_job_submitted_while_shutting_down_is_failed_not_lost() -> None:
    """submit() racing shutdown(): a job behind the stop sentinel still gets an answer."""
    loop = asyncio.new_event_loop()
    try:
        for _ in range(200):
            worker = WorkerThread("racing")
            outcomes: list[object] = []
            done = threading.Event()
            go = threading.Barrier(2)

            def on_done(result, exc, outcomes=outcomes, done=done):
                outcomes.append(exc if exc is not None else result)
                done.set()

            def submit(worker=worker, on_done=on_done, go=go):
                go.wait()
                try:
                    worker.submit(lambda x: x, 1, loop, on_done)
                except BatcherClosedError as exc:
                    on_done(None, exc)

            def shutdown(worker=worker, go=go):
                go.wait()
                worker.shutdown()

            threads = [threading.Thread(target=submit), threading.Thread(target=shutdown)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            deadline = time.monotonic() + GUARD
            while not done.is_set() and time.monotonic() < deadline:
                loop.run_until_complete(asyncio.sleep(0.001))  # run the delivery callbacks
            assert done.is_set(), "a job submitted during shutdown was never answered"
            assert outcomes[0] == 1 or isinstance(outcomes[0], BatcherClosedError)
    finally:
        loop.close()


def test_jobs_left_behind_the_stop_sentinel_fail_with_batcher_closed() -> None:
    loop = asyncio.new_event_loop()
    worker = WorkerThread("draining")
    gate = threading.Event()
    outcomes: list[object] = []
    worker.submit(lambda _: gate.wait(10), None, loop, lambda r, e: outcomes.append(("first", e)))
    worker.shutdown()
    # What a submit that passed its closed-check just before shutdown() would enqueue:
    worker._jobs.put((lambda x: x, 2, loop, lambda r, e: outcomes.append(("late", e))))
    gate.set()
    worker.thread.join(10)
    for _ in range(10):
        loop.run_until_complete(asyncio.sleep(0.001))
    loop.close()
    assert [name for name, _ in outcomes] == ["first", "late"]
    assert outcomes[0][1] is None and isinstance(outcomes[1][1], BatcherClosedError)


async def test_copy_result_gives_every_caller_but_the_first_a_copy() -> None:
    batcher = AutoBatcher(lambda keys: [[k] for k in keys], copy_result=list)
    a, b, c = await within(asyncio.gather(*(batcher.submit(1) for _ in range(3))))
    assert a == b == c == [1]
    assert len({id(a), id(b), id(c)}) == 3
    plain = AutoBatcher(lambda keys: [[k] for k in keys])
    d, e = await within(asyncio.gather(plain.submit(2), plain.submit(2)))
    assert d is e
    await batcher.aclose()
    await plain.aclose()


async def test_a_failing_copy_fails_its_caller_alone_and_frees_the_slot() -> None:
    """Copying a result for one caller raises: the others resolve, the key computes afresh."""

    def copy(value: str) -> str:
        if value == "b":
            raise MemoryError("no memory left to copy b's row")
        return value

    rec = Recorder(lambda keys: list(keys))
    batcher = AutoBatcher(rec, max_batch_size=8, copy_result=copy)
    calls = [asyncio.ensure_future(batcher.submit(k)) for k in ["b", "b", "a", "a", "c"]]
    done, pending = await asyncio.wait(calls, timeout=5)
    assert not pending, f"{len(pending)} callers of the batch were never resolved"
    assert calls[0].result() == "b"  # the first caller gets the result itself
    assert isinstance(calls[1].exception(), MemoryError)  # only the failed copy's caller
    assert [c.result() for c in calls[2:]] == ["a", "a", "c"]
    assert await asyncio.wait_for(batcher.submit("a"), 5) == "a"  # not a dead slot
    assert rec.batches == [["b", "a", "c"], ["a"]]
    await batcher.aclose()

"""AutoBatcher: one test per lifecycle rule (event loops, closing, worker threads, copies).

Ordering is made deterministic with asyncio's FIFO ready queue (``sleep(0)`` = one
loop pass) and with threading events that hold a batch inside ``batch_fn``. The
``within`` guard only turns a hang into a failure; nothing asserts on timing.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from batching_kit import GUARD, Recorder, passes, within
from hypothesis import given
from hypothesis import strategies as st

from genlm_core.errors import (
    BatcherClosedError,
    BatcherLoopError,
    GenlmError,
    WorkerInitError,
)
from genlm_core.runtime import AutoBatcher, LoopBatchers, WorkerThread


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


# -- event-loop binding -------------------------------------------------------------------------


def shut_down(loop: asyncio.AbstractEventLoop) -> None:
    """Close a loop the way asyncio.run does: cancel its tasks first."""
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:  # an idle batcher has no task left on the loop
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.close()


def test_made_outside_an_event_loop_raises_with_the_fix() -> None:
    with pytest.raises(BatcherLoopError, match="inside the running event loop.*LoopBatchers"):
        AutoBatcher(lambda keys: keys, name="early")


def test_use_from_another_event_loop_raises_naming_both() -> None:
    first = asyncio.new_event_loop()
    second = asyncio.new_event_loop()

    async def make() -> AutoBatcher[int, int]:
        return AutoBatcher(lambda keys: keys, name="bound")

    try:
        batcher = first.run_until_complete(make())
        assert first.run_until_complete(batcher.submit(1)) == 1
        with pytest.raises(BatcherLoopError) as info:
            second.run_until_complete(batcher.submit(2))
        err = info.value
        assert isinstance(err, GenlmError) and isinstance(err, RuntimeError)
        assert repr(first) in str(err) and repr(second) in str(err)
        assert "bound" in str(err) and "LoopBatchers" in str(err)
        assert first.run_until_complete(batcher.submit(3)) == 3  # its own loop still served
        shut_down(first)  # a closed loop never runs again: its batcher stays bound to it
        with pytest.raises(BatcherLoopError):
            second.run_until_complete(batcher.submit(4))
        batcher.close()
    finally:
        first.close()
        second.close()


def test_loop_batchers_serve_successive_asyncio_runs_over_one_thread() -> None:
    seen: list[threading.Thread] = []

    def fn(keys: list[str]) -> list[str]:
        seen.append(threading.current_thread())
        return keys

    batchers = LoopBatchers(fn, name="runs")

    async def run(key: str) -> tuple[str, AutoBatcher[str, str]]:
        return await batchers.get().submit(key), batchers.get()

    (a, first), (b, second) = asyncio.run(run("a")), asyncio.run(run("b"))
    assert (a, b) == ("a", "b") and first is not second
    assert seen[0] is seen[1]  # one worker thread kept across the loops
    batchers.close()


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
    async def run() -> AutoBatcher[int, int]:
        batcher = AutoBatcher(lambda keys: keys)
        assert await batcher.submit(1) == 1
        return batcher

    batcher = asyncio.run(run())
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


async def test_repr_names_the_batcher() -> None:
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


async def test_worker_thread_must_be_a_worker_thread() -> None:
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

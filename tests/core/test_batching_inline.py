"""AutoBatcher's cheap batches: run on the event loop by the caller that opens them.

A batch whose recent predecessors took under ``inline_below`` seconds is computed on
the loop itself, by the first caller (no task, no thread hop: genlm-backend's leader);
anything slower, or a batcher on a shared thread, keeps the worker thread. Ordering is
made deterministic with ``sleep(0)`` passes; nothing asserts on timing.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from batching_kit import Recorder, passes, within

from genlm_core.errors import BatcherClosedError, BatchSizeMismatchError
from genlm_core.runtime import AutoBatcher, RequestFailure, WorkerThread


def on_loop(rec: Recorder) -> list[bool]:
    """For each batch so far, whether it ran in this (the event loop's) thread."""
    return [t is threading.current_thread() for t in rec.threads]


@pytest.mark.parametrize("bad", [-1e-4, float("nan"), float("inf"), "0.1", True])
async def test_inline_below_is_validated(bad: Any) -> None:
    with pytest.raises(ValueError, match=rf"inline_below must be .*, got {bad!r}"):
        AutoBatcher(lambda keys: keys, inline_below=bad)


async def test_cheap_batches_run_on_the_loop_after_the_first_measured_one() -> None:
    rec = Recorder()
    batcher = AutoBatcher(rec)
    for key in range(4):
        assert await within(batcher.submit(key)) == ("r", key)
    assert on_loop(rec) == [False, True, True, True]  # the first one is measured in the thread
    assert batcher.stats.inline_batches == 3 and batcher.stats.batches == 4
    await within(batcher.aclose())


async def test_slow_batches_stay_in_the_thread_and_one_slow_batch_sends_the_next_back() -> None:
    slow = {"k"}
    rec = Recorder(lambda keys: [time.sleep(0.02) if k in slow else k for k in keys])
    batcher = AutoBatcher(rec)
    for key in ["a", "b", "k", "c", "k2"]:
        await within(batcher.submit(key))
    # a: first (thread); b: cheap (loop); k: slower than expected (loop, once);
    # c: back in the thread, where it is measured; k2: cheap again, but the estimate
    # only halves per cheap batch (20 ms -> 10 ms), so it stays in the thread.
    assert on_loop(rec) == [False, True, True, False, False]
    await within(batcher.aclose())


async def test_a_shared_worker_thread_or_inline_below_zero_never_runs_on_the_loop() -> None:
    shared = WorkerThread("shared")
    rec_shared, rec_zero = Recorder(), Recorder()
    on_shared = AutoBatcher(rec_shared, worker_thread=shared)
    zero = AutoBatcher(rec_zero, inline_below=0)
    assert on_shared.policy.inline_below == 0
    for key in range(3):
        await within(on_shared.submit(key))
        await within(zero.submit(key))
    assert on_loop(rec_shared) == on_loop(rec_zero) == [False] * 3
    assert on_shared.stats.inline_batches == zero.stats.inline_batches == 0
    await within(on_shared.aclose())
    await within(zero.aclose())
    shared.shutdown()


async def warm(batcher: AutoBatcher[Any, Any]) -> None:
    """One batch in the thread, so the next cheap ones run on the loop."""
    await within(batcher.submit("warm-up"))


async def test_callers_of_one_pass_share_the_leaders_batch() -> None:
    rec = Recorder()
    batcher = AutoBatcher(rec, max_batch_size=4)
    await warm(batcher)
    results = await within(asyncio.gather(*(batcher.submit(k) for k in range(10))))
    assert results == [("r", k) for k in range(10)]
    assert rec.batches[1:] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    await within(batcher.aclose())


async def test_a_cancelled_leader_hands_the_batch_on_and_its_key_is_not_computed() -> None:
    rec = Recorder()
    batcher = AutoBatcher(rec)
    await warm(batcher)
    leader = asyncio.ensure_future(batcher.submit("leader"))
    await passes(1)  # the leader opened the batch and holds it for one pass
    other = asyncio.ensure_future(batcher.submit("other"))
    leader.cancel()
    assert await within(other) == ("r", "other")
    with pytest.raises(asyncio.CancelledError):
        await leader
    assert rec.batches[1:] == [["other"]]
    assert await within(batcher.submit("after")) == ("r", "after")
    await within(batcher.aclose())


async def test_a_leader_does_not_wait_for_batches_after_its_own() -> None:
    rec = Recorder()
    batcher = AutoBatcher(rec, max_batch_size=2)
    await warm(batcher)
    rest = [asyncio.ensure_future(batcher.submit(k)) for k in range(5)]
    while not rest[0].done():
        await asyncio.sleep(0)
    # The leader returned with its own batch; a task sends the others.
    assert rec.batches[1:] == [[0, 1]]
    assert await within(asyncio.gather(*rest)) == [("r", k) for k in range(5)]
    await within(batcher.aclose())


async def test_an_error_on_the_loop_fails_its_batch_alone() -> None:
    def fn(keys: list[Any]) -> list[Any]:
        if "bad" in keys:
            raise ValueError("bad key")
        return keys

    batcher = AutoBatcher(fn)
    await warm(batcher)
    with pytest.raises(ValueError, match="bad key"):
        await within(batcher.submit("bad"))
    assert await within(batcher.submit("fine")) == "fine"
    assert batcher.stats.inline_batches == 2 and batcher.stats.errors == 1
    await within(batcher.aclose())


async def test_an_interrupt_on_the_loop_answers_the_callers_then_propagates() -> None:
    def fn(keys: list[Any]) -> list[Any]:
        if "interrupt" in keys:
            raise KeyboardInterrupt
        return keys

    batcher = AutoBatcher(fn)
    await warm(batcher)
    other = asyncio.ensure_future(batcher.submit("other"))
    with pytest.raises(KeyboardInterrupt):
        await batcher.submit("interrupt")  # the leader: "other" is in its batch
    with pytest.raises(RuntimeError, match="interrupted by KeyboardInterrupt"):
        await within(other)
    assert await within(batcher.submit("fine")) == "fine"
    await within(batcher.aclose())


async def test_a_lone_caller_gets_results_failures_and_errors_as_from_any_batch() -> None:
    # One key, one caller: the round trip that skips the general take/deliver steps.
    def fn(keys: list[Any]) -> Any:
        (key,) = keys
        if key == "own failure":
            return [RequestFailure(LookupError("no such key"))]
        if key == "two results":
            return [key, key]
        if key == "tuple":
            return (("t", key),)  # any sequence of one result
        if key == "raises":
            raise ValueError("the whole batch failed")
        return [("r", key)]

    batcher = AutoBatcher(fn)
    await warm(batcher)
    assert await within(batcher.submit("a")) == ("r", "a")
    assert await within(batcher.submit("tuple")) == ("t", "tuple")
    with pytest.raises(LookupError, match="no such key"):
        await within(batcher.submit("own failure"))
    with pytest.raises(BatchSizeMismatchError, match="2 results for 1 keys"):
        await within(batcher.submit("two results"))
    assert await within(batcher.submit("two results" + "!")) == ("r", "two results!")
    with pytest.raises(ValueError, match="the whole batch failed"):
        await within(batcher.submit("raises"))
    assert await within(batcher.submit("after")) == ("r", "after")
    stats = batcher.stats
    assert (stats.requests, stats.batches, stats.inline_batches) == (8, 8, 7)
    assert stats.errors == 2 and stats.max_batch_seen == 1  # a key's own failure is not one
    assert batcher.policy.waiting == {} and batcher.policy.pending == []
    await within(batcher.aclose())


async def test_an_interrupt_of_a_lone_callers_batch_propagates_and_the_batcher_goes_on() -> None:
    def fn(keys: list[Any]) -> list[Any]:
        if keys == ["interrupt"]:
            raise KeyboardInterrupt
        return keys

    batcher = AutoBatcher(fn)
    await warm(batcher)
    with pytest.raises(KeyboardInterrupt):
        await batcher.submit("interrupt")
    assert batcher.policy.waiting == {} and batcher.stats.errors == 1
    assert await within(batcher.submit("fine")) == "fine"
    await within(batcher.aclose())


async def test_a_caller_cancelled_by_the_batch_fn_on_the_loop_leaves_the_others_answered() -> None:
    tasks: dict[str, asyncio.Task[Any]] = {}

    def fn(keys: list[Any]) -> list[Any]:
        if "b" in keys:
            tasks["b"].cancel()  # b's future is cancelled before its result comes
        return keys

    batcher = AutoBatcher(fn)
    await warm(batcher)
    for key in "abc":
        tasks[key] = asyncio.ensure_future(batcher.submit(key))
    assert await within(tasks["a"]) == "a" and await within(tasks["c"]) == "c"
    with pytest.raises(asyncio.CancelledError):
        await tasks["b"]
    assert batcher.policy.waiting == {} and batcher.stats.errors == 0
    await within(batcher.aclose())


@pytest.mark.parametrize("drain", [False, True])
async def test_aclose_while_a_leader_holds_its_batch(drain: bool) -> None:
    rec = Recorder()
    batcher = AutoBatcher(rec)
    await warm(batcher)
    leader = asyncio.ensure_future(batcher.submit("leader"))
    await passes(1)  # the leader holds its batch; close in this same pass:
    await batcher.aclose(drain=drain)  # (within() would run it as a task, a pass later)
    if drain:
        assert leader.done() and leader.result() == ("r", "leader")
    else:
        with pytest.raises(BatcherClosedError):
            await within(leader)
        assert rec.batches[1:] == []


def test_an_interrupt_in_the_worker_task_answers_every_waiting_caller() -> None:
    # A KeyboardInterrupt out of a task stops the loop; the callers it left waiting
    # must have an answer if the program goes on with that loop.
    def fn(keys: list[Any]) -> list[Any]:
        if "interrupt" in keys:
            raise KeyboardInterrupt
        return keys

    loop = asyncio.new_event_loop()
    try:

        async def start() -> tuple[Any, asyncio.Future[Any], asyncio.Future[Any]]:
            batcher = AutoBatcher(fn, max_batch_size=1)
            await warm(batcher)
            # submit_many sends through the worker task (no leader): "interrupt" goes
            # first, on the loop, and "later" is still pending when it raises.
            first = asyncio.ensure_future(batcher.submit_many(["interrupt"]))
            return batcher, first, asyncio.ensure_future(batcher.submit_many(["later"]))

        batcher, first, later = loop.run_until_complete(start())
        with pytest.raises(KeyboardInterrupt):
            loop.run_until_complete(asyncio.sleep(1))
        with pytest.raises(RuntimeError, match="batch_fn was interrupted by KeyboardInterrupt"):
            loop.run_until_complete(asyncio.wait_for(first, 5))
        with pytest.raises(RuntimeError, match="worker was interrupted .*; not computed"):
            loop.run_until_complete(asyncio.wait_for(later, 5))
        loop.run_until_complete(batcher.aclose())
    finally:
        loop.close()


def test_a_leader_left_in_a_closed_loop_closes_quietly() -> None:
    # A loop closed without asyncio.run leaves the leader suspended in its hold; when
    # its coroutine is closed (garbage collection), it must not schedule a task there.
    loop = asyncio.new_event_loop()

    async def start() -> asyncio.Task[Any]:
        # Not adaptive, so the leader holds its batch until max_wait (10 s) has passed.
        batcher = AutoBatcher(lambda keys: keys, adaptive=False, max_wait=10, inline_below=1)
        batcher.policy.measured(0.0)  # known cheap: the next batch has a leader
        held = asyncio.ensure_future(batcher.submit("held"))
        await passes(2)
        return held

    held = loop.run_until_complete(start())
    loop.close()
    held.get_coro().close()  # raised RuntimeError("Event loop is closed") before


def test_a_worker_task_left_in_a_closed_loop_closes_quietly() -> None:
    # The same for the worker task: closing its coroutine (GeneratorExit) after the
    # loop closed must not try to answer callers through that loop.
    loop = asyncio.new_event_loop()

    async def start() -> asyncio.Task[Any]:
        batcher = AutoBatcher(lambda keys: keys, adaptive=False, max_wait=10, inline_below=0)
        held = asyncio.ensure_future(batcher.submit("held"))
        await passes(2)
        return held

    held = loop.run_until_complete(start())
    (worker,) = [t for t in asyncio.all_tasks(loop) if t is not held]
    loop.close()
    worker.get_coro().close()  # raised RuntimeError("Event loop is closed") before
    held.get_coro().close()


def test_a_caller_of_many_keys_left_in_a_closed_loop_closes_quietly() -> None:
    # submit_many abandons its futures when its coroutine is closed: not through a
    # closed loop (cancelling a future schedules its callbacks there).
    loop = asyncio.new_event_loop()

    async def start() -> asyncio.Task[Any]:
        batcher = AutoBatcher(lambda keys: keys, adaptive=False, max_wait=10, inline_below=0)
        many = asyncio.ensure_future(batcher.submit_many(["a", "b"]))
        await passes(2)
        return many

    many = loop.run_until_complete(start())
    (worker,) = [t for t in asyncio.all_tasks(loop) if t is not many]
    loop.close()
    many.get_coro().close()  # raised RuntimeError("Event loop is closed") before
    worker.get_coro().close()

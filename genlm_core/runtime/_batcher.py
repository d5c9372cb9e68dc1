"""AutoBatcher: one event loop's requests, coalesced into calls of a sync function."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
import types
import weakref
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

from genlm_core.errors import BatcherClosedError, BatcherLoopError
from genlm_core.runtime._dispatch import _FIRST, _FULL, Added, DispatchPolicy, Step
from genlm_core.runtime._outcomes import (
    BatcherStats,
    RequestFailure,
    abandon,
    checked,
    deliver,
    fail_waiting,
)
from genlm_core.runtime._worker import WorkerThread

K = TypeVar("K", bound=Hashable)
R = TypeVar("R")
_running_loop = asyncio._get_running_loop  # the running loop or None (asyncio exports it)
#: Default ``inline_below``: about what handing a batch to a thread and back costs here,
#: so a batch run on the loop stalls it no longer than the hand-off would have taken.
INLINE_BELOW = 1e-4


@types.coroutine
def _one_pass() -> Any:
    """Let the event loop run one pass (``asyncio.sleep(0)`` less its own call)."""
    yield


class AutoBatcher(Generic[K, R]):
    """Request-coalescing scheduler: many ``await submit(key)`` -> few ``batch_fn(keys)``.

    Bound to the event loop it is made in ([`LoopBatchers`][genlm_core.runtime.LoopBatchers]
    makes one per loop); ``batch_fn`` runs in a [`WorkerThread`][genlm_core.runtime.WorkerThread].

    Args:
        batch_fn: Called in the worker thread with a list of unique keys; returns one
            result per key, in order (a [`RequestFailure`][] fails that key alone).
        max_batch_size: Most keys a batch (see [`policy`][] for when a batch goes).
        max_wait: Seconds the first request may wait (with ``adaptive``, a cap).
        adaptive: Also send once a pass of the event loop adds no key.
        name: Names it in errors, and names a thread of its own.
        worker_thread: The thread ``batch_fn`` runs in, shared with other batchers and
            never shut down by this one. Default: a thread of its own, stopped on close.
        copy_result: When several callers wait for one key, the first gets the result
            and each other one ``copy_result(result)``. None: they share the object.
        closed_error: Makes the error callers get once it is closed (default:
            [`BatcherClosedError`][]).
        inline_below: Seconds: while recent batches took less, a batch runs on the event
            loop itself, with no thread hop; one that turns out slow stalls the loop and
            sends the next ones to the thread (0: never). Default: 100 us with a thread
            of its own, 0 on a shared ``worker_thread`` (its state may be bound to it).

    Raises ValueError for a bad argument, BatcherLoopError outside a running event loop.
    Use: ``await batcher.submit(key)`` from many coroutines, then ``await batcher.aclose()``.
    """

    def __init__(
        self,
        batch_fn: Callable[[list[K]], Sequence[R]],
        *,
        max_batch_size: int = 64,
        max_wait: float = 0.0,
        adaptive: bool = True,
        name: str = "AutoBatcher",
        worker_thread: WorkerThread | None = None,
        copy_result: Callable[[R], R] | None = None,
        closed_error: Callable[[], BaseException] | None = None,
        inline_below: float | None = None,
    ) -> None:
        if not callable(batch_fn):
            raise ValueError(f"batch_fn must be callable, got {batch_fn!r}")
        if not isinstance(worker_thread, WorkerThread | None):
            raise ValueError(f"worker_thread must be a WorkerThread, got {worker_thread!r}")
        if (loop := _running_loop()) is None:
            raise BatcherLoopError.no_loop(name)
        loop_ref = self._loop_ref = weakref.ref(loop)  # weakly: LoopBatchers keys by loop
        if inline_below is None:
            inline_below = INLINE_BELOW if worker_thread is None else 0.0
        self.policy = DispatchPolicy(
            max_batch_size, max_wait, adaptive, lambda: loop_ref().time(), inline_below
        )
        self._add = self.policy.add
        self._batch_fn = batch_fn
        self._copy_result = copy_result
        self._closed_error = closed_error or (
            lambda: BatcherClosedError(f"{name} is closed; make a new AutoBatcher to submit more")
        )
        self.name = name
        self._own_thread = worker_thread is None
        self._thread = WorkerThread(name) if worker_thread is None else worker_thread
        self._closed = False
        self._draining = False  # closed, but the queued requests are still computed
        self._worker: asyncio.Future[Any] | None = None  # the task, or a leader's future
        self._wakeup: asyncio.Future[None] | None = None  # the worker's, while it sleeps
        self._in_flight = 0  # batches handed to the thread and not yet finished

    @property
    def closed(self) -> bool:
        """Whether [`close`][] or [`aclose`][] was called."""
        return self._closed

    @property
    def stats(self) -> BatcherStats:
        """A snapshot of the batcher's counters."""
        return dataclasses.replace(self.policy.stats)

    async def submit(self, key: K) -> R:
        """``key``'s result (equal keys computed once), or what ``batch_fn`` raised for it.

        Also BatchSizeMismatchError, BatcherClosedError, BatcherLoopError (another loop).
        """
        loop = asyncio.get_running_loop()
        if loop is not self._loop_ref() or self._closed:
            raise self._refusal(loop)
        fut = loop.create_future()
        added = self._add(key, fut)  # the hot path: one call besides the future
        if added is not _FIRST and added is not _FULL:  # it joined a batch: just wait
            return await fut
        if added is _FIRST and self.policy.cheap and self._worker is None and not self._in_flight:
            await self._lead(fut, loop)
            return fut.result()  # (answered: the leader returns once it is)
        self._rouse(added, loop)
        return await fut

    async def submit_many(self, keys: Sequence[K]) -> list[R]:
        """Results of several keys, in order, with no task each; the first failure raises."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop_ref() or self._closed:
            raise self._refusal(loop)
        futs = []
        for key in keys:
            added = self._add(key, fut := loop.create_future())
            futs.append(fut)
            if added is _FIRST or added is _FULL:
                self._rouse(added, loop)
        try:
            return [await fut for fut in futs]
        except BaseException:
            abandon(futs)
            raise

    async def aclose(self, *, drain: bool = False) -> None:
        """[`close`][], then wait until every batch answered; ``drain``: queued ones run."""
        on_our_loop = asyncio.get_running_loop() is self._loop_ref()
        self._draining |= drain and on_our_loop and not self._closed
        self.close()
        while on_our_loop and (worker := self._worker) is not None:
            await asyncio.wait([worker])  # not cancelled if *we* are cancelled

    def close(self) -> None:
        """Close from any thread, without waiting: queued requests fail, in-flight deliver."""
        if self._closed:  # two threads racing here both close: harmless, idempotent
            return
        self._closed = True
        loop = self._loop_ref()
        if loop is _running_loop():
            self._close_on_loop()
        elif loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._close_on_loop)
            except RuntimeError:  # closed meanwhile: nothing there can run again
                pass
        if self._worker is None and self._own_thread:
            self._thread.shutdown()  # after the batches already handed to it

    def __repr__(self) -> str:
        p, state = self.policy, "closed" if self._closed else "open"
        return (
            f"<{type(self).__name__} {self.name!r} {state} pending={len(p.pending)} "
            f"max_batch_size={p.max_batch_size} max_wait={p.max_wait} adaptive={p.adaptive}>"
        )

    def _refusal(self, loop: asyncio.AbstractEventLoop) -> BaseException:
        if loop is not self._loop_ref():
            return BatcherLoopError.other_loop(self.name, self._loop_ref(), loop)
        return self._closed_error()

    def _rouse(self, added: Added, loop: asyncio.AbstractEventLoop) -> None:
        """A batch opened or filled: start the worker, or wake it."""
        if added is _FIRST and self._worker is None:
            self._worker = loop.create_task(self._run())
        else:
            self._wake()

    async def _lead(self, own: asyncio.Future[Any], loop: asyncio.AbstractEventLoop) -> None:
        """Send cheap batches from the caller that opened one, until ``own`` is answered.

        A task would cost more than such a batch, so this caller sends it itself (as
        genlm-backend's leader does), then hands any work left to a task: it never waits
        for other callers' results. Cancelled or interrupted, it hands over too.
        """
        self._worker = own  # what aclose waits for
        policy = self.policy
        try:
            if policy.adaptive:  # _hold's loop, inlined: the lone caller pays for each call
                seen = -1  # at least one pass, so callers already scheduled get their turn
                while not self._closed and (n := len(policy.pending)) != seen and not policy.due():
                    seen = n
                    await _one_pass()
            else:
                await self._hold(loop)
            if not self._closed or self._draining:
                if policy.cheap and (lone := policy.take_lone(own)):  # fewer calls
                    self._run_here(lone, [[own]])
                else:
                    self._start(loop)
            if not own.done():  # (its batch went to the thread)
                await self._run(own)
        except BaseException:  # cancelled or interrupted: nobody waits for own now
            abandon((own,))
            raise
        finally:
            idle = not (policy.pending or self._in_flight) or loop.is_closed()  # (no next_step)
            if idle or policy.next_step(self._in_flight, self._closed, self._draining) is Step.STOP:
                self._idle()
            else:  # work left for a task
                self._worker = loop.create_task(self._run())

    async def _run(self, own: asyncio.Future[Any] | None = None) -> None:
        """Send batches while there is work; ends when idle, so nothing holds the loop.

        Run by the worker task, or by a leading caller until its future ``own`` is
        answered (see ``_lead``).
        """
        loop = asyncio.get_running_loop()
        policy = self.policy
        try:
            while own is None or not own.done():
                step = policy.next_step(self._in_flight, self._closed, self._draining)
                if step is Step.STOP:
                    return
                if step is Step.WAIT:
                    await self._sleep(loop)
                    continue
                if step is Step.HOLD:
                    await self._hold(loop)
                self._start(loop)
        except asyncio.CancelledError:  # never leave callers hanging
            if own is None:  # (a leader's successor task carries on)
                why = f"{self.name}'s worker was cancelled (is its event loop shutting down?)"
                fail_waiting(self.policy.drop_all(), BatcherClosedError(why))
            raise
        except Exception as exc:  # a bug in the batcher itself
            fail_waiting(self.policy.drop_all(), exc)
            raise
        except BaseException as exc:  # KeyboardInterrupt from a batch run here: none may hang
            if own is None and not loop.is_closed():  # (a closed loop's callers are gone)
                why = f"{self.name}'s worker was interrupted by {exc!r}; not computed"
                fail_waiting(self.policy.drop_all(), RuntimeError(why))
            raise
        finally:
            if own is None:
                self._idle()

    def _idle(self) -> None:
        """No batch pending or in flight: nothing runs until the next request."""
        self._worker = None
        if self._closed and self._own_thread:
            self._thread.shutdown()

    async def _sleep(self, loop: asyncio.AbstractEventLoop) -> None:  # until _wake
        self._wakeup = loop.create_future()
        try:
            await self._wakeup
        finally:
            self._wakeup = None

    def _wake(self) -> None:
        if (fut := self._wakeup) is not None and not fut.done():
            fut.set_result(None)

    async def _hold(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait until the pending batch is due (or the batcher closes)."""
        policy = self.policy
        if policy.adaptive:
            seen = -1  # at least one pass, so callers already scheduled get their turn
            while not self._closed and (n := len(policy.pending)) != seen and not policy.due():
                seen = n  # (a pass that adds no key makes the batch due)
                await _one_pass()
            return
        if not (self._closed or policy.due()):
            timer = loop.call_at(policy.deadline(), self._wake)
            try:
                await self._sleep(loop)  # _add wakes it when the batch fills up
            finally:
                timer.cancel()

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Compute the due batch here if cheap, else take it and hand it to the thread."""
        if self.policy.cheap and not self._in_flight:
            keys, waiters = self.policy.take(settled=True)  # (no request joins them here)
            if keys:
                self._run_here(keys, waiters)
            return
        keys, waiters = self.policy.take()
        if not keys:
            return
        self._in_flight += 1
        on_done = functools.partial(self._returned, keys, waiters)
        try:
            self._thread.submit(self._call, keys, loop, on_done)
        except Exception as exc:  # the shared worker thread was shut down
            on_done(None, self._closed_error() if self._closed else exc)

    def _run_here(self, keys: list[K], waiters: list[list[Any]]) -> None:
        """Compute a taken, settled batch on the event loop (nothing of ours in flight).

        The steps are inlined, and one key with one caller skips ``deliver``: a lone
        caller's round trip is mostly calls (benchmarks/bench_batcher.py).
        """
        policy = self.policy
        policy.stats.inline_batches += 1
        start = time.perf_counter()
        try:
            results, error = self._batch_fn(keys), None
            if type(results) is not list or len(results) != len(keys):
                results = checked(results, len(keys), self.name)
        except BaseException as exc:  # answered below; a KeyboardInterrupt then goes on up
            results, error = None, exc
        policy.measured(time.perf_counter() - start)
        if error is None and len(waiters) == 1 and len(futs := waiters[0]) == 1:
            if type(value := results[0]) is not RequestFailure and not futs[0].done():
                futs[0].set_result(value)
                return
        policy.stats.errors += error is not None
        deliver(waiters, results, error, self._copy_result, self.name)
        if error is not None and not isinstance(error, Exception):
            raise error

    def _call(self, keys: list[K]) -> list[R]:
        """Run ``batch_fn`` in the worker thread, and time it."""
        start = time.perf_counter()
        try:
            return checked(self._batch_fn(keys), len(keys), self.name)
        finally:
            self.policy.measured(time.perf_counter() - start)

    def _returned(self, keys: list[K], waiters: list[Any], results: Any, exc: Any) -> None:
        """A batch came back from the thread (on the loop): wake the worker, answer all."""
        self._in_flight -= 1
        self._wake()
        self.policy.settle(keys, waiters, failed=exc is not None)
        deliver(waiters, results, exc, self._copy_result, self.name)

    def _close_on_loop(self) -> None:
        """Fail the queued requests (unless draining) and wake the worker to exit."""
        if not self._draining:
            fail_waiting(self.policy.drop_pending(), self._closed_error())
        self._wake()

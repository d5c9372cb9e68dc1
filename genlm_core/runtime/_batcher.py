"""AutoBatcher: one event loop's requests, coalesced into calls of a sync function."""

from __future__ import annotations

import asyncio
import dataclasses
import weakref
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

from genlm_core.errors import BatcherClosedError, BatcherLoopError
from genlm_core.runtime._alarm import Alarm, one_pass
from genlm_core.runtime._batch_runs import BatchRuns
from genlm_core.runtime._dispatch import _FIRST, _FULL, INLINE_BELOW, Added, DispatchPolicy, Step
from genlm_core.runtime._outcomes import BatcherStats, abandon, fail_waiting, worker_exit_error
from genlm_core.runtime._worker import WorkerThread

K = TypeVar("K", bound=Hashable)
R = TypeVar("R")
_running_loop = asyncio._get_running_loop  # the running loop or None (asyncio exports it)


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
        if (loop := _running_loop()) is None:
            raise BatcherLoopError.no_loop(name)
        loop_ref = self._loop_ref = weakref.ref(loop)  # weakly: LoopBatchers keys by loop
        if inline_below is None:
            inline_below = INLINE_BELOW if worker_thread is None else 0.0
        self.policy = DispatchPolicy(
            max_batch_size, max_wait, adaptive, lambda: loop_ref().time(), inline_below
        )
        self._add = self.policy.add
        self._closed_error = closed_error or (
            lambda: BatcherClosedError(f"{name} is closed; make a new AutoBatcher to submit more")
        )
        self.name = name
        self._alarm = Alarm()
        self._runs = BatchRuns(
            batch_fn,
            self.policy,
            worker_thread,
            name=name,
            copy_result=copy_result,
            wake=self._alarm.wake,
            handoff_error=lambda exc: self._closed_error() if self._closed else exc,
        )
        self._closed = False
        self._draining = False  # closed, but the queued requests are still computed
        self._worker: asyncio.Future[Any] | None = None  # the task, or a leader's future

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
        if added is _FIRST and self.policy.cheap and self._worker is None:
            if not self._runs.in_flight:  # a cheap batch, nothing else running: lead it
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
        if self._worker is None:
            self._runs.stop_thread()  # after the batches already handed to it

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
            self._alarm.wake()

    async def _lead(self, own: asyncio.Future[Any], loop: asyncio.AbstractEventLoop) -> None:
        """Send cheap batches from the caller that opened one, until ``own`` is answered.

        A task costs more than such a batch, so this caller sends it (as genlm-backend's
        leader does); work left, or a cancel, goes to a task: it never waits on others.
        """
        self._worker = own  # what aclose waits for
        policy, runs = self.policy, self._runs
        try:
            if policy.adaptive:  # Alarm.hold's loop, inlined: a lone caller pays per call
                seen = -1  # at least one pass, so callers already scheduled get their turn
                while not self._closed and (n := len(policy.pending)) != seen and not policy.due():
                    seen = n
                    await one_pass()
            else:
                await self._alarm.hold(loop, policy, lambda: self._closed)
            if not self._closed or self._draining:
                if policy.cheap and (lone := policy.take_lone(own)):  # fewer calls
                    runs.run_lone(lone, own)
                else:
                    runs.start(loop)
            if not own.done():  # (its batch went to the thread)
                await self._run(own)
        except BaseException:  # cancelled or interrupted: nobody waits for own now
            abandon((own,))
            raise
        finally:
            idle = not (policy.pending or runs.in_flight) or loop.is_closed()  # (no next_step)
            if idle or policy.next_step(runs.in_flight, self._closed, self._draining) is Step.STOP:
                self._idle()
            else:  # work left for a task
                self._worker = loop.create_task(self._run())

    async def _run(self, own: asyncio.Future[Any] | None = None) -> None:
        """Send batches while there is work, then end (nothing holds the loop idle).

        Run by the worker task, or by a leading caller until ``own`` is answered.
        """
        loop = asyncio.get_running_loop()
        policy, runs = self.policy, self._runs
        try:
            while own is None or not own.done():
                step = policy.next_step(runs.in_flight, self._closed, self._draining)
                if step is Step.STOP:
                    return
                if step is Step.WAIT:
                    await self._alarm.sleep(loop)
                    continue
                if step is Step.HOLD:
                    await self._alarm.hold(loop, policy, lambda: self._closed)
                runs.start(loop)
        except BaseException as exc:  # never leave callers hanging
            error = worker_exit_error(exc, self.name, own is not None, loop.is_closed())
            if error is not None:
                fail_waiting(self.policy.drop_all(), error)
            raise
        finally:
            if own is None:
                self._idle()

    def _idle(self) -> None:
        """No batch pending or in flight: nothing runs until the next request."""
        self._worker = None
        if self._closed:
            self._runs.stop_thread()

    def _close_on_loop(self) -> None:
        """Fail the queued requests (unless draining) and wake the worker to exit."""
        if not self._draining:
            fail_waiting(self.policy.drop_pending(), self._closed_error())
        self._alarm.wake()

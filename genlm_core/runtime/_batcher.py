"""AutoBatcher: coalesce concurrent async requests into batched calls of a sync function.

A batch goes when full, at its first request's deadline, or (``adaptive``) when an
event-loop pass adds no new key; docs/architecture.md ("When a batch goes") says why.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import math
import threading
import weakref
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

from genlm_core._validation import is_int_at_least, is_seconds
from genlm_core.errors import BatcherClosedError, BatcherLoopError, BatchSizeMismatchError
from genlm_core.runtime._outcomes import BatcherStats, fail_waiting, failure_of, resolve
from genlm_core.runtime._worker import WorkerThread

K = TypeVar("K", bound=Hashable)
R = TypeVar("R")

_Waiters = list  # list[asyncio.Future[R]]: the futures of every caller of one key
_PIPELINE_DEPTH = 2  # batches handed to the thread at once: one running, one full queued


class AutoBatcher(Generic[K, R]):
    """Request-coalescing scheduler: many ``await submit(key)`` -> few ``batch_fn(keys)``.

    Args:
        batch_fn: Called in a worker thread with a list of unique keys; returns one
            result per key, in order (a :class:`RequestFailure` fails that key alone).
        max_batch_size: Most unique keys per call of ``batch_fn``.
        max_wait: Seconds the first request of a batch may wait for company; with
            ``adaptive=True`` only a cap (0 = no cap besides ``max_batch_size``).
        adaptive: Also dispatch as soon as an event-loop pass adds no new key.
        name: Shown in errors and used as the worker thread's name.
        worker_thread: A :class:`WorkerThread` shared with other batchers, never shut
            down by this one. Default: a dedicated thread, stopped on close.
        copy_result: When several callers wait for one key, the first gets the result
            and each other one ``copy_result(result)``. None: they share the object.
        closed_error: Makes the error queued and later callers get once the batcher is
            closed. Default: a :class:`BatcherClosedError`.

    Raises:
        ValueError: ``max_batch_size`` is not an integer >= 1, or ``max_wait`` is not
            a finite number >= 0.

    Example: ``AutoBatcher(lambda keys: [f(k) for k in keys])``, then ``await
    batcher.submit(key)`` from any number of coroutines, and ``await batcher.aclose()``.
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
    ) -> None:
        if not callable(batch_fn):
            raise ValueError(f"batch_fn must be callable, got {batch_fn!r}")
        if not is_int_at_least(max_batch_size, 1):
            raise ValueError(f"max_batch_size must be an integer >= 1, got {max_batch_size!r}")
        if not is_seconds(max_wait):
            raise ValueError(f"max_wait must be a finite number of seconds >= 0, got {max_wait!r}")
        if worker_thread is not None and not isinstance(worker_thread, WorkerThread):
            raise ValueError(f"worker_thread must be a WorkerThread, got {worker_thread!r}")
        self._batch_fn = batch_fn
        self._copy_result = copy_result
        self._closed_error_factory = closed_error
        self.max_batch_size = max_batch_size
        self.max_wait = float(max_wait)
        self.adaptive = bool(adaptive)
        self.name = name
        self._shared_lane = worker_thread
        self._lane: WorkerThread | None = None  # our own, started on first use
        self._lock = threading.Lock()  # guards _closed and _lane across threads
        self._closed = False
        self._draining = False  # closed, but the queued requests are still computed
        # The loop: held strongly while a worker lives, else weakly (a dead loop can go).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_ref: weakref.ref[asyncio.AbstractEventLoop] | None = None
        # Every key pending or in flight -> its callers' futures. Pending keys, in order:
        self._slots: dict[K, _Waiters] = {}
        self._queue: list[K] = []
        self._first_at = 0.0  # loop.time() of the first request of the pending batch
        # A batch of an older worker epoch (the state was reset) touches no counter.
        self._epoch = 0
        self._worker: asyncio.Task[None] | None = None
        self._wakeup: asyncio.Future[None] | None = None
        self._in_flight = 0  # batches handed to the thread and not yet finished
        self._stats = BatcherStats()  # counters, copied out by .stats

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` or :meth:`aclose` was called."""
        return self._closed

    @property
    def stats(self) -> BatcherStats:
        """A snapshot of the batcher's counters."""
        return dataclasses.replace(self._stats)

    async def submit(self, key: K) -> R:
        """Queue ``key`` (hashable) and wait for its element of ``batch_fn``'s result.

        Equal keys pending or in flight are computed once.

        Raises:
            BatcherClosedError: The batcher was closed before the result was ready.
            BatchSizeMismatchError: ``batch_fn`` returned the wrong number of results.
            BatcherLoopError: Called from another event loop than the bound one.
            Exception: Whatever ``batch_fn`` raised for the batch holding ``key``.
        """
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._bind(loop)
        if self._closed:
            raise self._closed_error()
        fut = loop.create_future()
        self._add(key, fut, loop)
        return await fut

    async def submit_many(self, keys: Sequence[K]) -> list[R]:
        """Queue several keys at once (no task per key); their results, in order.

        Duplicates are computed once. Raises the first failure among the keys (see
        :meth:`submit`), abandoning the others.
        """
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._bind(loop)
        if self._closed:
            raise self._closed_error()
        keys = list(keys)
        futs = [loop.create_future() for _ in keys]
        for key, fut in zip(keys, futs, strict=True):
            self._add(key, fut, loop)
        try:
            return [await fut for fut in futs]
        except BaseException:
            for fut in futs:
                if not fut.cancel() and not fut.cancelled():
                    fut.exception()  # mark retrieved: no "exception never retrieved" log
            raise

    async def aclose(self, *, drain: bool = False) -> None:
        """Close and wait: in-flight batches deliver; queued requests fail, or run if ``drain``.

        Returns once every batch it ran has resolved its callers and its own thread
        stopped, so a model may be freed right after. Drains only on the bound loop.
        Idempotent.
        """
        if drain and not self._closed and self._bound_loop() is _running_loop():
            self._draining = True
        self.close()
        worker = self._worker
        if worker is not None and not worker.done() and worker.get_loop() is _running_loop():
            await asyncio.wait([worker])  # not cancelled if *we* are cancelled

    def close(self) -> None:
        """Close from any thread, without waiting (queued requests fail, in-flight deliver).

        Later submits raise. Idempotent.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        loop = self._bound_loop()
        if loop is None or loop.is_closed():
            self._abandon()
        elif loop is _running_loop():
            self._close_on_loop()
        else:
            try:
                loop.call_soon_threadsafe(self._close_on_loop)
            except RuntimeError:  # closed meanwhile: nothing there can run again
                self._abandon()
        if self._worker is None:
            self._stop_lane()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (
            f"<{type(self).__name__} {self.name!r} {state} pending={len(self._queue)} "
            f"max_batch_size={self.max_batch_size} max_wait={self.max_wait} "
            f"adaptive={self.adaptive}>"
        )

    def _add(self, key: K, fut: asyncio.Future[R], loop: asyncio.AbstractEventLoop) -> None:
        """Register one caller's future for ``key``: share a pending one or queue the key."""
        self._stats.requests += 1
        waiters = self._slots.get(key)
        if waiters is not None:  # pending or in flight: share it
            waiters.append(fut)
            self._stats.deduplicated += 1
            return
        self._slots[key] = [fut]
        queue = self._queue
        queue.append(key)
        n = len(queue)
        if n == 1:
            self._first_at = loop.time()
            if self._worker is None:
                self._worker = loop.create_task(self._run(self._epoch))
            else:
                _wake(self._wakeup)
        elif n == self.max_batch_size:
            _wake(self._wakeup)

    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        bound = self._bound_loop()
        if bound is loop:
            self._loop = loop
            return
        if bound is not None and not bound.is_closed():
            raise BatcherLoopError(
                f"{self.name} is bound to event loop {bound!r} but was used from event loop "
                f"{loop!r}. An AutoBatcher serves one event loop: create one per loop "
                f"(or close the first loop before reusing the batcher)."
            )
        # First use, or the old loop is closed: nothing bound to it can ever run again.
        self._abandon()
        self._loop = loop
        self._loop_ref = weakref.ref(loop)

    def _bound_loop(self) -> asyncio.AbstractEventLoop | None:
        return self._loop_ref() if self._loop_ref is not None else None

    def _closed_error(self) -> BaseException:
        if self._closed_error_factory is not None:
            return self._closed_error_factory()
        return BatcherClosedError(
            f"{self.name} is closed; create a new AutoBatcher (or a new model) to submit more"
        )

    async def _run(self, epoch: int) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                if self._closed and not (self._draining and self._queue):
                    if not self._in_flight:
                        return
                    await self._sleep(loop)  # until the in-flight batches have delivered
                elif self._in_flight:
                    if len(self._queue) >= self.max_batch_size and (
                        self._in_flight < _PIPELINE_DEPTH
                    ):
                        self._start(loop, epoch)  # full: it cannot grow, queue it now
                    else:
                        await self._sleep(loop)  # until a batch finishes or one fills up
                elif self._queue:
                    await self._hold(loop)
                    self._start(loop, epoch)
                else:
                    # Idle: end, so that nothing of ours holds the loop (a closed loop and
                    # its batcher can then be freed); the next request starts a worker.
                    return
        except asyncio.CancelledError:
            if epoch == self._epoch:
                self._fail_all(
                    BatcherClosedError(
                        f"{self.name}'s worker was cancelled (is its event loop shutting "
                        f"down?); the request was not computed"
                    )
                )
            raise
        except Exception as exc:  # a bug in the batcher itself: never leave callers hanging
            if epoch == self._epoch:
                self._fail_all(exc)
            raise
        finally:
            if epoch == self._epoch:
                self._reset_worker()
                self._loop = None  # keep only the weak reference: the loop may be freed
                if self._closed:
                    self._stop_lane()

    async def _sleep(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait for _wake: a first request, a full batch, a finished batch, or close."""
        self._wakeup = loop.create_future()
        try:
            await self._wakeup
        finally:
            self._wakeup = None

    async def _hold(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait until the pending batch is due (full, deadline, or adaptive quiescence)."""
        limit = self.max_batch_size
        queue = self._queue
        if self.adaptive:
            deadline = self._first_at + self.max_wait if self.max_wait > 0 else math.inf
            seen = -1  # at least one pass, so callers already scheduled get their turn
            while True:
                n = len(queue)
                if n == seen or n >= limit or self._closed or loop.time() >= deadline:
                    return
                seen = n
                await asyncio.sleep(0)
        deadline = self._first_at + self.max_wait
        if len(queue) >= limit or loop.time() >= deadline:
            return
        timer = loop.call_at(deadline, lambda: _wake(self._wakeup))
        try:
            await self._sleep(loop)  # _add wakes it when the batch fills up
        finally:
            timer.cancel()

    def _take(self) -> tuple[list[K], list[_Waiters]]:
        """Pop up to max_batch_size pending keys, dropping those whose callers all left."""
        queue = self._queue
        if len(queue) <= self.max_batch_size:
            taken, self._queue = queue, []
        else:
            taken = queue[: self.max_batch_size]
            del queue[: self.max_batch_size]
        slots = self._slots
        keys: list[K] = []
        waiters: list[_Waiters] = []
        for key in taken:
            futs = slots[key]
            for fut in futs:
                if not fut.done():
                    keys.append(key)
                    waiters.append(futs)
                    break
            else:  # every caller cancelled: don't compute it
                del slots[key]
        return keys, waiters

    def _start(self, loop: asyncio.AbstractEventLoop, epoch: int) -> None:
        """Take the due batch and hand it to the thread; it comes back via _finish."""
        keys, waiters = self._take()
        if not keys:
            return
        self._in_flight += 1
        self._stats.batches += 1
        self._stats.max_batch_seen = max(self._stats.max_batch_seen, len(keys))
        on_done = functools.partial(self._finish, epoch, keys, waiters)
        try:
            lane = self._shared_lane
            if lane is None:
                with self._lock:
                    if self._lane is None:
                        self._lane = WorkerThread(self.name)
                    lane = self._lane
            lane.submit(self._call, keys, loop, on_done)
        except Exception as exc:  # the shared worker thread was shut down
            on_done(None, self._closed_error() if self._closed else exc)

    def _call(self, keys: list[K]) -> list[R]:
        """Run batch_fn (worker thread) and check it returned one result per key."""
        out = list(self._batch_fn(keys))  # also splits a tensor into rows, off the loop
        if len(out) != len(keys):
            raise BatchSizeMismatchError(
                f"batch_fn returned {len(out)} results for {len(keys)} keys; it must "
                f"return exactly one result per key, in the order of the keys ({self.name})"
            )
        return out

    def _finish(
        self,
        epoch: int,
        keys: list[K],
        waiters: list[_Waiters],
        results: list[R] | None,
        exc: BaseException | None,
    ) -> None:
        """Resolve (or fail) every future of a finished batch, in one loop callback."""
        if epoch == self._epoch:
            self._in_flight -= 1
            if exc is not None:
                self._stats.errors += 1
            _wake(self._wakeup)
        if exc is not None and not isinstance(exc, Exception):
            # KeyboardInterrupt/SystemExit in the thread: never raise those in callers.
            err = RuntimeError(f"{self.name}: batch_fn was interrupted by {exc!r}")
            err.__cause__ = exc
            exc = err
        slots = self._slots
        for key, futs in zip(keys, waiters, strict=True):  # no slot outlives its batch
            other = slots.pop(key, futs)
            if other is not futs:  # a newer slot (the state was reset meanwhile): keep it
                slots[key] = other
        values: Any = results if results is not None else itertools.repeat(None)
        try:
            for futs, value in zip(waiters, values, strict=False):  # values may repeat
                error = exc if exc is not None else failure_of(value)
                resolve(futs, value, error, self._copy_result)
        except BaseException as failure:  # e.g. KeyboardInterrupt: still answer everyone
            fail_waiting(waiters, failure)
            raise

    def _fail_all(self, exc: BaseException) -> None:
        """Fail every pending and in-flight future (loop thread)."""
        slots, self._slots, self._queue = self._slots, {}, []
        fail_waiting(slots.values(), exc)

    def _reset_worker(self) -> None:
        self._epoch += 1
        self._worker = None
        self._wakeup = None
        self._in_flight = 0

    def _close_on_loop(self) -> None:
        """Fail the queued requests (unless draining) and wake the worker to exit."""
        if self._draining:
            _wake(self._wakeup)
            return
        queue, self._queue = self._queue, []
        fail_waiting([self._slots.pop(key, ()) for key in queue], self._closed_error())
        _wake(self._wakeup)

    def _abandon(self) -> None:
        """The bound loop is gone: drop its futures, they can never be resolved."""
        self._slots = {}
        self._queue = []
        self._reset_worker()
        self._loop = None

    def _stop_lane(self) -> None:
        with self._lock:
            lane, self._lane = self._lane, None
        if lane is not None:
            lane.shutdown()


def _wake(fut: asyncio.Future[None] | None) -> None:
    if fut is not None and not fut.done():
        fut.set_result(None)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None

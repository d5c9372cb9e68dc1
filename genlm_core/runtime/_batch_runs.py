"""BatchRuns: where an AutoBatcher's taken batches run, on its loop or in its worker thread."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from genlm_core.runtime._dispatch import DispatchPolicy
from genlm_core.runtime._outcomes import RequestFailure, checked, deliver
from genlm_core.runtime._worker import WorkerThread

K = TypeVar("K")
R = TypeVar("R")


class BatchRuns(Generic[K, R]):
    """Runs the batches a policy hands out and answers their callers.

    A batch expected to be cheap ([`DispatchPolicy.cheap`][]) runs on the event loop
    with nothing in flight; any other goes to the worker thread. Every run is timed
    into the policy. Handed its collaborators; it knows nothing of the batcher.

    Args:
        batch_fn: Keys -> one result per key (a [`RequestFailure`][] fails that key).
        policy: Takes the due batch, and learns what each one cost.
        thread: Where batches that are not cheap run, shared (never shut down here);
            None: a thread of its own, named ``name``, shut down by [`stop_thread`][].
        name: Names the batcher in errors.
        copy_result: Each further caller of one key gets ``copy_result(result)``.
        wake: Called on the loop when a batch comes back from the thread.
        handoff_error: The error for the callers of a batch the thread refused.

    Raises ValueError (naming the value) for a ``batch_fn`` or ``thread`` of the wrong kind.
    """

    def __init__(
        self,
        batch_fn: Callable[[list[K]], Sequence[R]],
        policy: DispatchPolicy[Any],
        thread: WorkerThread | None,
        *,
        name: str,
        copy_result: Callable[[R], R] | None,
        wake: Callable[[], None],
        handoff_error: Callable[[Exception], BaseException],
    ) -> None:
        if not callable(batch_fn):
            raise ValueError(f"batch_fn must be callable, got {batch_fn!r}")
        if not isinstance(thread, WorkerThread | None):
            raise ValueError(f"worker_thread must be a WorkerThread, got {thread!r}")
        self._batch_fn = batch_fn
        self._policy = policy
        self._own_thread = thread is None
        self.thread = WorkerThread(name) if thread is None else thread
        self._name = name
        self._copy_result = copy_result
        self._wake = wake
        self._handoff_error = handoff_error
        self.in_flight = 0  # batches handed to the thread and not yet back

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run the due batch here if cheap, else take it and hand it to the thread."""
        policy = self._policy
        if policy.cheap and not self.in_flight:
            keys, waiters = policy.take(settled=True)  # (no request joins them here)
            if keys:
                self.run_here(keys, waiters)
            return
        keys, waiters = policy.take()
        if not keys:
            return
        self.in_flight += 1
        on_done = functools.partial(self._returned, keys, waiters)
        try:
            self.thread.submit(self._call, keys, loop, on_done)
        except Exception as exc:  # the shared worker thread was shut down
            on_done(None, self._handoff_error(exc))

    def run_here(self, keys: list[K], waiters: list[list[Any]]) -> None:
        """Compute a taken, settled batch on the event loop (nothing in flight).

        One key for one caller goes through [`run_lone`][]: a lone caller's round trip
        is mostly calls (benchmarks/bench_batcher.py).
        """
        if len(waiters) == 1 and len(waiters[0]) == 1:
            return self.run_lone(keys, waiters[0][0])
        policy = self._policy
        policy.stats.inline_batches += 1
        start = time.perf_counter()
        try:
            results, error = self._batch_fn(keys), None
            if type(results) is not list or len(results) != len(keys):
                results = checked(results, len(keys), self._name)
        except BaseException as exc:  # answered below; a KeyboardInterrupt then goes on up
            results, error = None, exc
        policy.measured(time.perf_counter() - start)
        self._answer(waiters, results, error)

    def run_lone(self, keys: list[K], own: Any) -> None:
        """[`run_here`][] of one key for its one caller ``own``: no lists made, none counted."""
        policy = self._policy
        policy.stats.inline_batches += 1
        start = time.perf_counter()
        try:
            results, error = self._batch_fn(keys), None
        except BaseException as exc:  # answered below; a KeyboardInterrupt then goes on up
            results, error = None, exc
        policy.measured(time.perf_counter() - start)
        if error is None and type(results) is list and len(results) == 1:
            if type(value := results[0]) is not RequestFailure and not own.done():
                own.set_result(value)
                return
        if error is None:
            try:
                results = checked(results, 1, self._name)
            except Exception as exc:  # noqa: BLE001 - the caller's failure, handed to it
                results, error = None, exc
        self._answer([[own]], results, error)

    def _answer(self, waiters: list[list[Any]], results: Any, error: Any) -> None:
        """Every caller's outcome; then an interrupt from ``batch_fn`` goes on up."""
        self._policy.stats.errors += error is not None
        deliver(waiters, results, error, self._copy_result, self._name)
        if error is not None and not isinstance(error, Exception):
            raise error

    def stop_thread(self) -> None:
        """Shut the worker thread down if it is this batcher's own (after its queued work)."""
        if self._own_thread:
            self.thread.shutdown()

    def _call(self, keys: list[K]) -> list[R]:
        """Run ``batch_fn`` in the worker thread, and time it."""
        start = time.perf_counter()
        try:
            return checked(self._batch_fn(keys), len(keys), self._name)
        finally:
            self._policy.measured(time.perf_counter() - start)

    def _returned(self, keys: list[K], waiters: list[Any], results: Any, exc: Any) -> None:
        """A batch came back from the thread (on the loop): wake the worker, answer all."""
        self.in_flight -= 1
        self._wake()
        self._policy.settle(keys, waiters, failed=exc is not None)
        deliver(waiters, results, exc, self._copy_result, self._name)

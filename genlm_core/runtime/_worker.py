"""WorkerThread: the thread a model's batches run in, one at a time, in order."""

from __future__ import annotations

import asyncio
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any

from genlm_core.errors import BatcherClosedError, WorkerInitError


class WorkerThread:
    """A daemon thread that runs batches one at a time, in order, for one or more batchers.

    Shared by batchers that run in turn (a model's, one per ``asyncio.run``), so what it
    set up outlives each event loop. It exits once shut down or garbage-collected, and
    keeps no reference to ``initializer`` after calling it.

    Args:
        name: The thread's name (shown in errors).
        initializer: Called once in the thread before its first batch. If it raises,
            every batch fails with [`WorkerInitError`][genlm_core.errors.WorkerInitError].
    """

    def __init__(self, name: str, initializer: Callable[[], None] | None = None) -> None:
        if initializer is not None and not callable(initializer):
            raise ValueError(f"initializer must be callable, got {initializer!r}")
        self.name = name
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False
        # submit() and shutdown() take it, so no job is ever queued behind the stop sentinel.
        self._lock = threading.Lock()
        self.thread = threading.Thread(
            target=_serve, args=(self._jobs, [initializer], name), name=name, daemon=True
        )
        self.thread.start()
        weakref.finalize(self, self._jobs.put, None)

    def submit(
        self,
        fn: Callable[[Any], Any],
        arg: Any,
        loop: asyncio.AbstractEventLoop,
        on_done: Callable[[Any, BaseException | None], None],
    ) -> None:
        """Run ``fn(arg)`` after the jobs before it; then ``on_done(result, exc)`` on ``loop``.

        Raises:
            BatcherClosedError: The thread was shut down.
        """
        with self._lock:
            if self._closed:
                raise BatcherClosedError(
                    f"worker thread {self.name!r} was shut down; the batch was not computed"
                )
            self._jobs.put((fn, arg, loop, on_done))

    @property
    def closed(self) -> bool:
        """Whether [`shutdown`][] was called."""
        return self._closed

    def shutdown(self) -> None:
        """Stop the thread once the jobs already submitted are done. Idempotent."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._jobs.put(None)


def _serve(
    jobs: queue.SimpleQueue[Any], holder: list[Callable[[], None] | None], name: str
) -> None:
    broken: WorkerInitError | None = None
    initializer = holder.pop()  # from then on only this frame refers to it
    if initializer is not None:
        try:
            initializer()
        except Exception as exc:  # every batch of this thread fails with the reason
            broken = WorkerInitError(
                f"{name}: the worker thread's initializer {initializer!r} raised "
                f"{type(exc).__name__}: {exc}; no batch can run on this thread"
            )
            broken.__cause__ = exc
    initializer = None  # a bound method would keep its object (a model) alive
    while (job := jobs.get()) is not None:
        fn, arg, loop, on_done = job
        job = None
        try:
            if broken is not None:
                raise broken
            outcome: tuple[Any, BaseException | None] = (fn(arg), None)
        except BaseException as exc:  # delivered to the callers, as an Executor would
            outcome = (None, exc)
        # Hand the results (and the callback, which leads to the model) over in a box the
        # loop empties: once the callers have them, this thread holds nothing of theirs.
        delivery = [(on_done, outcome)]
        fn = arg = on_done = outcome = None
        _post(loop, delivery)
        loop = delivery = None
    _fail_left_behind(jobs, name)


def _post(loop: asyncio.AbstractEventLoop, delivery: list[Any]) -> None:
    try:
        loop.call_soon_threadsafe(_deliver, delivery)
    except RuntimeError:  # the loop is closed: nobody is waiting any more
        pass


def _fail_left_behind(jobs: queue.SimpleQueue[Any], name: str) -> None:
    """Answer every job still queued after the stop sentinel: none may wait forever."""
    while True:
        try:
            job = jobs.get_nowait()
        except queue.Empty:
            return
        if job is None:
            continue
        _, _, loop, on_done = job
        error = BatcherClosedError(
            f"worker thread {name!r} was shut down before this batch ran; it was not computed"
        )
        _post(loop, [(on_done, (None, error))])


def _deliver(delivery: list[tuple[Callable[..., None], tuple[Any, BaseException | None]]]) -> None:
    on_done, outcome = delivery.pop()
    on_done(*outcome)

"""LoopBatchers: one AutoBatcher per event loop, over one worker thread kept across loops."""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from genlm_core.runtime._batcher import AutoBatcher
from genlm_core.runtime._worker import WorkerThread


class LoopBatchers:
    """The batchers of one batch function, one per event loop it is used from.

    Args:
        batch_fn: The batch function of every batcher (see [`AutoBatcher`][]).
        name: Names the batchers and the worker thread in errors.
        initializer: Called once in the worker thread before its first batch.
        **options: Passed to each [`AutoBatcher`][] (``max_batch_size``,
            ``max_wait``, ``copy_result``).
    """

    def __init__(
        self,
        batch_fn: Callable[[list[Any]], Sequence[Any]],
        *,
        name: str,
        initializer: Callable[[], None] | None = None,
        **options: Any,
    ) -> None:
        self._batch_fn = batch_fn
        self._name = name
        self._initializer = initializer
        self._options = options
        self._batchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AutoBatcher] = (
            weakref.WeakKeyDictionary()
        )
        self._worker: WorkerThread | None = None
        # Loops of several threads may ask at once: one worker thread, one batcher a loop.
        self._lock = threading.Lock()

    def get(self) -> AutoBatcher:
        """The running event loop's batcher, created (with the worker thread) on first use.

        Safe from several threads. Loops are held weakly, so a closed loop and its
        batcher are freed once the program drops them.
        """
        loop = asyncio.get_running_loop()
        batcher = self._batchers.get(loop)
        if batcher is not None and not batcher.closed:
            return batcher
        with self._lock:
            batcher = self._batchers.get(loop)
            if batcher is None or batcher.closed:
                worker = self._worker
                if worker is None or worker.closed:
                    worker = WorkerThread(f"{self._name}.worker", self._initializer)
                    self._worker = worker
                batcher = self._batchers[loop] = AutoBatcher(
                    self._batch_fn, name=self._name, worker_thread=worker, **self._options
                )
            return batcher

    async def aclose(self, *, drain: bool = False) -> None:
        """Close every batcher, waiting for the running loop's (see [`AutoBatcher.aclose`][])."""
        mine = self._batchers.get(asyncio.get_running_loop())
        try:
            if mine is not None and not mine.closed:
                await mine.aclose(drain=drain)
        finally:
            self.close()

    def close(self) -> None:
        """Close every batcher without waiting; stop the worker after the batches it has."""
        with self._lock:
            batchers = list(self._batchers.values())
            self._batchers.clear()
            worker = self._worker
            if worker is not None:
                worker.shutdown()  # after the batches already handed to it
        for batcher in batchers:
            batcher.close()

"""LoopBatchers: an AutoBatcher per event loop (and variant), over one worker thread for all."""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from genlm_core.runtime._batcher import AutoBatcher
from genlm_core.runtime._worker import WorkerThread

#: A batcher's batch function and its options.
Kind = tuple[Callable[[list[Any]], Sequence[Any]], dict[str, Any]]


class LoopBatchers:
    """The batchers of one batch function (and its variants), one per event loop it is used from.

    Args:
        batch_fn: The batch function of every batcher (see [`AutoBatcher`][]).
        name: Names the batchers and the worker thread in errors.
        initializer: Called once in the worker thread before its first batch.
        variants: More batchers per loop, by name: ``{name: (batch_fn, options)}``, the
            options overriding ``**options`` (``get(name)``; the same worker thread).
        **options: Passed to each [`AutoBatcher`][] (``max_batch_size``,
            ``max_wait``, ``copy_result``).
    """

    def __init__(
        self,
        batch_fn: Callable[[list[Any]], Sequence[Any]],
        *,
        name: str,
        initializer: Callable[[], None] | None = None,
        variants: Mapping[str, Kind] | None = None,
        **options: Any,
    ) -> None:
        more = {name: (fn, {**options, **opts}) for name, (fn, opts) in (variants or {}).items()}
        self._kinds: dict[str | None, Kind] = {None: (batch_fn, options), **more}
        self._name = name
        self._initializer = initializer
        self._batchers: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[str | None, AutoBatcher]
        ] = weakref.WeakKeyDictionary()
        self._worker: WorkerThread | None = None
        # Loops of several threads may ask at once: one worker thread, one batcher a loop.
        self._lock = threading.Lock()

    def get(self, variant: str | None = None) -> AutoBatcher:
        """The running event loop's batcher, created (with the worker thread) on first use.

        ``variant``: one of the ``variants`` given (None: the batcher of ``batch_fn``).
        Safe from several threads. Loops are held weakly, so a closed loop and its
        batchers are freed once the program drops them.
        """
        loop = asyncio.get_running_loop()
        batcher = self._batchers.get(loop, {}).get(variant)
        if batcher is not None and not batcher.closed:
            return batcher
        batch_fn, options = self._kinds[variant]
        with self._lock:
            mine = self._batchers.setdefault(loop, {})
            batcher = mine.get(variant)
            if batcher is None or batcher.closed:
                worker = self._worker
                if worker is None or worker.closed:
                    worker = WorkerThread(f"{self._name}.worker", self._initializer)
                    self._worker = worker
                batcher = mine[variant] = AutoBatcher(
                    batch_fn, name=self._name, worker_thread=worker, **options
                )
            return batcher

    async def aclose(self, *, drain: bool = False) -> None:
        """Close every batcher, waiting for the running loop's (see [`AutoBatcher.aclose`][])."""
        mine = list(self._batchers.get(asyncio.get_running_loop(), {}).values())
        try:
            for batcher in mine:
                if not batcher.closed:
                    await batcher.aclose(drain=drain)
        finally:
            self.close()

    def close(self) -> None:
        """Close every batcher without waiting; stop the worker after the batches it has."""
        with self._lock:
            batchers = [b for mine in self._batchers.values() for b in mine.values()]
            self._batchers.clear()
            worker = self._worker
            if worker is not None:
                worker.shutdown()  # after the batches already handed to it
        for batcher in batchers:
            batcher.close()

"""AutoBatcher tests' shared kit: a recording ``batch_fn``, loop passes, a hang guard."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable
from typing import Any, TypeVar

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

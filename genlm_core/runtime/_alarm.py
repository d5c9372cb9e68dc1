"""Alarm: how an AutoBatcher's worker waits, for a wake-up, a deadline or a quiet pass."""

from __future__ import annotations

import asyncio
import types
from collections.abc import Callable
from typing import Any

from genlm_core.runtime._dispatch import DispatchPolicy


@types.coroutine
def one_pass() -> Any:
    """Let the event loop run one pass (``asyncio.sleep(0)`` less its own call)."""
    yield


class Alarm:
    """One sleeper at a time on the batcher's loop; [`wake`][] ends its sleep."""

    def __init__(self) -> None:
        self._wakeup: asyncio.Future[None] | None = None  # the sleeper's, while it sleeps

    async def sleep(self, loop: asyncio.AbstractEventLoop) -> None:
        """Until [`wake`][] is called."""
        self._wakeup = loop.create_future()
        try:
            await self._wakeup
        finally:
            self._wakeup = None

    def wake(self) -> None:
        """End the sleep, if any (on the loop's thread)."""
        if (fut := self._wakeup) is not None and not fut.done():
            fut.set_result(None)

    async def hold(
        self,
        loop: asyncio.AbstractEventLoop,
        policy: DispatchPolicy[Any],
        closed: Callable[[], bool],
    ) -> None:
        """Wait until ``policy``'s pending batch is due, or ``closed()``."""
        if policy.adaptive:
            seen = -1  # at least one pass, so callers already scheduled get their turn
            while not closed() and (n := len(policy.pending)) != seen and not policy.due():
                seen = n  # (a pass that adds no key makes the batch due)
                await one_pass()
            return
        if not (closed() or policy.due()):
            timer = loop.call_at(policy.deadline(), self.wake)
            try:
                await self.sleep(loop)  # a request that fills the batch wakes it
            finally:
                timer.cancel()

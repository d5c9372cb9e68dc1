"""Callers on several threads, and closing while calls are in flight.

A program may call the sync methods from one thread while async calls run on an event
loop in another; a backend's ``compute_batch`` must still run one call at a time
(unless the backend declares ``thread_safe = True``). ``async with lm:`` (and
``await lm.aclose()``) returns only once every call made inside has its answer.
Part of [`AsyncLMConformance`][genlm_core.testing.AsyncLMConformance].
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import torch

from genlm_core.errors import ModelClosedError
from genlm_core.lm import BatchedAsyncLM, ModelState

__all__ = ["ConcurrencyCases"]


def _variants(prompts: list[list[int]], n: int, salt: int) -> list[list[int]]:
    """``n`` distinct valid prompts (so that the output cache cannot answer them)."""
    out = []
    for k in range(n):
        head = prompts[k % len(prompts)]
        out.append([*head, *prompts[(k + salt) % len(prompts)][: 1 + k // len(prompts)]])
    return out


class _OverlapProbe:
    """Wraps ``compute_batch`` to count calls running at the same time."""

    def __init__(self, compute: Any) -> None:
        self._compute = compute
        self._lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.calls = 0

    def __call__(self, requests: Any) -> Any:
        with self._lock:
            self.running += 1
            self.calls += 1
            self.most = max(self.most, self.running)
        try:
            time.sleep(0.002)  # widen the window an overlap would need
            return self._compute(requests)
        finally:
            with self._lock:
                self.running -= 1


class ConcurrencyCases:
    """Threads calling at once; ``async with`` and ``aclose`` waiting for calls in flight."""

    atol: float

    async def test_sync_and_async_callers_on_two_threads(
        self, lm: Any, prompts: list[list[int]]
    ) -> None:
        probe = None
        if hasattr(lm, "compute_batch") and not getattr(lm, "thread_safe", False):
            probe = _OverlapProbe(lm.compute_batch)
            lm.compute_batch = probe  # the instance attribute shadows the method
        async_prompts = _variants(prompts, 24, salt=1)
        sync_prompts = _variants(prompts, 24, salt=2)

        def sync_side() -> list[torch.Tensor]:
            return [lm.next_token_logprobs_sync(ids) for ids in sync_prompts]

        async def async_side() -> list[torch.Tensor]:
            outs = []
            for k in range(0, len(async_prompts), 4):
                chunk = async_prompts[k : k + 4]
                outs += await asyncio.gather(*(lm.next_token_logprobs(ids) for ids in chunk))
            return outs

        from_thread, from_loop = await asyncio.gather(asyncio.to_thread(sync_side), async_side())
        if probe is not None:
            del lm.compute_batch
            assert probe.calls > 1
            assert probe.most == 1, (
                f"compute_batch ran {probe.most} calls at once; the core must serialise "
                f"them unless the backend sets thread_safe = True"
            )
        # Rows computed in other batch shapes and from other cached prefixes: atol plus a
        # float32 relative margin (log-probs near -20 move by ~1e-4). A race would not be
        # that close.
        lm.clear_cache()
        pairs = [
            *zip(sync_prompts, from_thread, strict=True),
            *zip(async_prompts, from_loop, strict=True),
        ]
        for ids, out in pairs:
            torch.testing.assert_close(
                out, lm.next_token_logprobs_sync(ids), atol=self.atol, rtol=1e-5
            )

    async def test_async_with_exit_waits_for_calls_in_flight(
        self, lm: Any, prompts: list[list[int]]
    ) -> None:
        async with lm:
            calls = [asyncio.ensure_future(lm.next_token_logprobs(ids)) for ids in prompts]
            await asyncio.sleep(0)  # queued in the batcher, or computing
        assert all(call.done() for call in calls), "async with returned before its calls"
        for call in calls:
            assert isinstance(call.result(), torch.Tensor)

    async def test_aclose_waits_for_calls_in_flight(
        self, lm: Any, prompts: list[list[int]]
    ) -> None:
        calls = [asyncio.ensure_future(lm.next_token_logprobs(ids)) for ids in prompts]
        await asyncio.sleep(0)
        await lm.aclose()
        assert all(call.done() and isinstance(call.result(), torch.Tensor) for call in calls)
        assert lm.closed
        await lm.aclose()  # idempotent

    async def test_one_lifecycle_open_draining_closed(
        self, lm: Any, prompts: list[list[int]]
    ) -> None:
        """While aclose() answers the calls made, a new call is refused, with the fix."""
        if not isinstance(lm, BatchedAsyncLM):
            pytest.skip("draining answers calls queued in the core's batcher only")
        assert lm.state is ModelState.OPEN and not lm.closed
        calls = [asyncio.ensure_future(lm.next_token_logprobs(ids)) for ids in prompts]
        await asyncio.sleep(0)
        closing = asyncio.ensure_future(lm.aclose())
        await asyncio.sleep(0)
        assert lm.state is ModelState.DRAINING and lm.closed
        with pytest.raises(ModelClosedError, match="load the model again"):
            await lm.next_token_logprobs(prompts[0])
        await closing
        assert lm.state is ModelState.CLOSED
        assert all(isinstance(call.result(), torch.Tensor) for call in calls)
        lm.cleanup()  # genlm-backend's name for close(): idempotent too

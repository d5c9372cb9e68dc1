"""Closing a model with batches queued and computing: nothing computes after ``cleanup``.

Once ``cleanup()`` returns, a backend may have freed its weights or its engine, so no
``compute_batch`` or ``compute_prefix_batch`` may start; the core guarantees it for
every backend, with no guard of the backend's own. Callers still waiting get their
result (their batch was computing) or a [`ModelClosedError`][genlm_core.errors.ModelClosedError]
naming the model; none hangs. Part of [`AsyncLMConformance`][genlm_core.testing.AsyncLMConformance].
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import torch

from genlm_core.errors import ModelClosedError

__all__ = ["ShutdownCases"]

#: Seconds every caller has to resolve after cleanup (a hang fails the case, never blocks).
RESOLVE_TIMEOUT = 120.0


def distinct_prompts(prompts: list[list[int]], n: int) -> list[list[int]]:
    """``n`` distinct valid prompts: a known prompt followed by a few digits in its tokens."""
    digits = sorted({t for ids in prompts for t in ids})
    head = max(prompts, key=len)
    if len(digits) == 1:  # one token id to build with: lengths tell the prompts apart
        return [[*head, *digits * (k + 1)] for k in range(n)]
    width = 1
    while len(digits) ** width < n:
        width += 1
    out = []
    for k in range(n):
        tail = []
        for _ in range(width):
            k, d = divmod(k, len(digits))
            tail.append(digits[d])
        out.append([*head, *tail])
    return out


class _StartProbe:
    """Wraps a model's compute methods to see each computation start, and when."""

    def __init__(self, lm: Any) -> None:
        self.started = threading.Event()
        self.closed = False  # set by the test once cleanup() has returned
        self.after_cleanup: list[str] = []
        self.calls = 0
        self._lock = threading.Lock()
        self._lm = lm
        self.names = [
            name
            for name in ("compute_batch", "compute_prefix_batch")
            if callable(getattr(lm, name, None))
        ]
        for name in self.names:
            setattr(lm, name, self._wrap(name, getattr(lm, name)))

    def _wrap(self, name: str, compute: Any) -> Any:
        def probed(requests: Any) -> Any:
            with self._lock:
                self.calls += 1
                if self.closed:
                    self.after_cleanup.append(name)
                first = not self.started.is_set()
            self.started.set()
            if first:
                time.sleep(0.05)  # cleanup() comes while this batch computes
            return compute(requests)

        return probed

    def remove(self) -> None:
        for name in self.names:
            self._lm.__dict__.pop(name, None)


class ShutdownCases:
    """``cleanup()`` with full batches queued and one computing."""

    async def test_cleanup_with_full_batches_queued_and_computing(
        self, lm: Any, prompts: list[list[int]]
    ) -> None:
        if not callable(getattr(lm, "compute_batch", None)):
            pytest.skip("no compute_batch to observe: the backend batches on its own")
        if getattr(lm, "cache", None) is not None:
            lm.clear_cache()
        batch_size = int(getattr(lm, "batch_size", 8))
        many = distinct_prompts(prompts, 2 * batch_size + 3)  # two full batches and more
        probe = _StartProbe(lm)
        try:
            calls = [asyncio.ensure_future(lm.next_token_logprobs(ids)) for ids in many]
            calls.append(asyncio.ensure_future(lm.prefix_next_token_logprobs(many[-1])))
            assert await asyncio.to_thread(probe.started.wait, RESOLVE_TIMEOUT), (
                "no batch started computing"
            )
            lm.cleanup()  # a batch computes, another may be queued in the worker thread
            probe.closed = True
            done, pending = await asyncio.wait(calls, timeout=RESOLVE_TIMEOUT)
            for call in pending:
                call.cancel()
            assert not pending, (
                f"{len(pending)} of {len(calls)} callers never resolved after cleanup()"
            )
            with pytest.raises(ModelClosedError):
                lm.next_token_logprobs_sync(many[0])
        finally:
            probe.remove()
        assert not probe.after_cleanup, (
            f"{type(lm).__name__}: {probe.after_cleanup} started after cleanup() returned; "
            f"the model may already be freed"
        )
        closed = 0
        for call in calls:
            exc = call.exception()
            if exc is None:
                assert isinstance(call.result(), torch.Tensor)
                continue
            assert isinstance(exc, ModelClosedError), (
                f"a caller waiting when the model was closed got {type(exc).__name__}: {exc}; "
                f"expected a result or ModelClosedError"
            )
            assert type(lm).__name__ in str(exc), f"the error does not name the model: {exc}"
            closed += 1
        assert closed, "every caller got a result: cleanup() came too late to test anything"

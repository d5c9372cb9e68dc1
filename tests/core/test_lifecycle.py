"""A model's lifecycle from a coroutine: cleanup and adapter swaps never hold the event loop.

Each stall bound is the issue's 100 ms, measured with a heartbeat coroutine (the
longest gap between its ticks) while a slow computation, or a slow adapter load, runs.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import weakref
from typing import Any

import pytest
import torch

from genlm_core.errors import ModelClosedError
from genlm_core.runtime import LoopBatchers
from genlm_core.testing import ByteTokenizer, MockAsyncLM

STALL_BOUND = 0.1  # seconds: the bound on the longest event-loop stall
SLOW = 1.0  # seconds a slow computation or adapter load takes


class Heartbeat:
    """Ticks every few milliseconds; :attr:`longest` is the longest gap between ticks."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._last = 0.0
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Heartbeat:
        self._last = time.perf_counter()
        self._task = asyncio.ensure_future(self._beat())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._tick()  # the gap up to now counts too (a stall may end the block)
        assert self._task is not None
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass

    def _tick(self) -> None:
        now = time.perf_counter()
        self.longest = max(self.longest, now - self._last)
        self._last = now

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(0.005)
            self._tick()


class SlowLM(MockAsyncLM):
    """A mock whose batches, adapter loads and unloads take :data:`SLOW` seconds."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.computing = threading.Event()
        self.computed = threading.Event()
        self.slow_compute = False

    def compute_batch(self, requests: Any) -> Any:
        self.computing.set()
        if self.slow_compute:
            time.sleep(SLOW)
        try:
            return super().compute_batch(requests)
        finally:
            self.computed.set()

    def load_adapter(self, adapter: Any) -> Any:
        time.sleep(SLOW)
        return super().load_adapter(adapter)

    def unload_adapter(self, adapter: Any, handle: Any) -> None:
        time.sleep(SLOW)


@pytest.fixture
def slow_lm():
    lm = SlowLM(ByteTokenizer(), cache_size=0, batch_size=1)  # one request a batch
    yield lm
    lm.cleanup()


async def test_cleanup_async_keeps_the_loop_running_while_a_slow_batch_computes(slow_lm):
    slow_lm.slow_compute = True
    call = asyncio.ensure_future(slow_lm.next_token_logprobs([1, 2]))
    queued = asyncio.ensure_future(slow_lm.next_token_logprobs([1, 3]))
    assert await asyncio.to_thread(slow_lm.computing.wait, 10)
    async with Heartbeat() as beat:
        await slow_lm.cleanup_async()
    assert slow_lm.closed
    assert beat.longest < STALL_BOUND, f"the event loop stalled {beat.longest:.3f} s"
    assert isinstance(await call, torch.Tensor)  # the batch in flight delivered
    with pytest.raises(ModelClosedError, match="SlowLM"):
        await queued


async def test_aclose_waits_off_the_loop_for_a_sync_caller_s_batch(slow_lm):
    """aclose() waits for a computation another thread started, without holding the loop."""
    slow_lm.slow_compute = True
    other = threading.Thread(target=slow_lm.next_token_logprobs_sync, args=([4, 5],))
    other.start()
    assert await asyncio.to_thread(slow_lm.computing.wait, 10)
    async with Heartbeat() as beat:
        await slow_lm.aclose()
    other.join()
    assert slow_lm.closed
    assert beat.longest < STALL_BOUND, f"the event loop stalled {beat.longest:.3f} s"


async def test_adapter_swap_async_keeps_the_loop_running(slow_lm, tmp_path):
    path = tmp_path / "adapter"
    path.write_bytes(b"weights")
    async with Heartbeat() as beat:
        await slow_lm.add_new_lora_async(path, "a")
    assert beat.longest < STALL_BOUND, f"loading stalled the loop {beat.longest:.3f} s"
    base = await slow_lm.next_token_logprobs([1, 2])
    tuned = await slow_lm.next_token_logprobs([1, 2], lora_name="a")
    assert not torch.equal(base, tuned)
    async with Heartbeat() as beat:
        await slow_lm.remove_lora_async("a")
    assert beat.longest < STALL_BOUND, f"unloading stalled the loop {beat.longest:.3f} s"
    assert slow_lm.lora_names == []


async def test_second_cleanup_returns_only_once_the_first_is_done(slow_lm):
    slow_lm.slow_compute = True
    call = asyncio.ensure_future(slow_lm.next_token_logprobs([1, 2]))
    assert await asyncio.to_thread(slow_lm.computing.wait, 10)
    first = asyncio.ensure_future(slow_lm.cleanup_async())
    await asyncio.sleep(0.05)  # the first cleanup waits for the batch in flight
    await slow_lm.cleanup_async()
    assert slow_lm.computed.is_set(), "the second cleanup returned while a batch computed"
    await first
    assert isinstance(await call, torch.Tensor)


async def test_a_row_that_cannot_be_copied_fails_its_request_alone(monkeypatch):
    from genlm_core.lm import _rows

    lm = MockAsyncLM(ByteTokenizer(), cache_size=0)
    copied = _rows.private
    doomed = lm.next_token_logprobs_sync([1, 3])

    def private(row):  # copying the row of [1, 3] meets memory pressure
        if torch.equal(row, doomed):
            raise MemoryError("no memory left for a copy")
        return copied(row)

    monkeypatch.setattr(_rows, "private", private)
    first, second = await asyncio.gather(
        lm.next_token_logprobs([1, 2]), lm.next_token_logprobs([1, 3]), return_exceptions=True
    )
    assert lm.batches[1:] == [2]  # one batch: the other request gets its row
    assert isinstance(first, torch.Tensor)
    assert isinstance(second, MemoryError)
    lm.cleanup()


def test_closed_event_loops_and_their_batchers_are_released():
    """Notebook style: a new loop per call, closed after it; none stays alive."""
    lm = MockAsyncLM(ByteTokenizer())

    async def call(i):
        await lm.next_token_logprobs([1, i + 1])
        return weakref.ref(lm._batcher())

    loops, batchers, tasks = [], [], []
    for i in range(20):
        loop = asyncio.new_event_loop()
        batchers.append(loop.run_until_complete(call(i)))
        tasks += [weakref.ref(task) for task in asyncio.all_tasks(loop)]
        loops.append(weakref.ref(loop))
        loop.close()
    del loop
    # The worker thread may still be leaving the frame that handed out the last batch
    # (its locals hold that batcher for a moment, under load): alive means 2 s later.
    deadline = time.monotonic() + 2.0
    while gc.collect() >= 0 and any(ref() is not None for ref in [*loops, *batchers]):
        if time.monotonic() > deadline:
            break
        time.sleep(0.01)
    kept = sum(ref() is not None for ref in loops)
    assert kept == 0, f"{kept} of 20 closed event loops kept alive"
    assert sum(ref() is not None for ref in batchers) == 0
    assert sum(ref() is not None for ref in tasks) == 0
    assert lm.next_token_logprobs_sync([1, 2]).shape == (len(lm.byte_vocab),)
    lm.cleanup()


def test_loops_of_two_threads_share_one_worker_thread(monkeypatch):
    from genlm_core.runtime import _per_loop

    made = []
    real = _per_loop.WorkerThread

    def slow_worker(*args, **kwargs):  # widens the window in which both see no worker
        time.sleep(0.05)
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(_per_loop, "WorkerThread", slow_worker)
    batchers = LoopBatchers(lambda keys: keys, name="shared")
    barrier = threading.Barrier(2)
    got = []

    def use():
        async def main():
            barrier.wait()
            batcher = batchers.get()
            return batcher, await batcher.submit(1)

        got.append(asyncio.run(main()))

    threads = [threading.Thread(target=use) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    batchers.close()
    assert [result for _, result in got] == [1, 1]
    assert len(made) == 1, f"{len(made)} worker threads started for one LoopBatchers"
    assert got[0][0]._runs.thread is got[1][0]._runs.thread

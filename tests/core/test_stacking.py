"""Batch calls copy each computed row once, into the tensor they return (issue 41).

``batch_next_token_logprobs`` takes its rows from the model's "stacking" batcher, which
hands them out uncopied (``copy_result=None``, ``RowComputation.run`` without
``for_callers``): the stack is the copy. The rows must still be the caller's alone.
"""

import asyncio
import threading

import pytest
import torch

from genlm_core.lm import _rows
from genlm_core.runtime import LoopBatchers
from genlm_core.testing import ByteTokenizer, MockAsyncLM


@pytest.fixture
def lm():
    model = MockAsyncLM(ByteTokenizer())
    yield model
    model.cleanup()


@pytest.fixture
def copies(monkeypatch):
    """How many rows the worker copied for callers (``RowComputation.run``'s copies)."""
    counted = [0]
    inner = _rows._private_or_failures

    def counting(rows):
        counted[0] += len(rows)
        return inner(rows)

    monkeypatch.setattr(_rows, "_private_or_failures", counting)
    return counted


def expected(lm, prompts):
    return torch.stack([lm.next_token_logprobs_sync(p) for p in prompts])


async def test_a_batch_call_copies_each_row_once_and_owns_its_result(lm, copies):
    prompts = [[i + 1, 7] for i in range(6)] + [[1, 7]]  # one prompt twice
    rows = await lm.batch_next_token_logprobs(prompts)
    assert copies[0] == 0  # the stack alone copied them
    want = expected(lm, prompts)
    assert torch.equal(rows, want)
    rows.fill_(0.0)  # the caller's own: neither the cache nor later calls change
    assert torch.equal(await lm.batch_next_token_logprobs(prompts), want)
    assert torch.equal(await lm.next_token_logprobs([1, 7]), want[0])


async def test_per_prompt_callers_still_get_rows_of_their_own(lm):
    prompts = [[i + 1, 4] for i in range(5)]
    together = asyncio.gather(
        lm.batch_next_token_logprobs(prompts),
        lm.batch_next_token_logprobs(prompts),
        *(lm.next_token_logprobs(p) for p in prompts),
    )
    first, second, *singles = await together
    want = expected(lm, prompts)
    assert torch.equal(first, want) and torch.equal(second, want)
    assert torch.equal(torch.stack(singles), want)
    cached = lm.cache.get(lm.make_request(prompts[0]))
    pointers = {first.data_ptr(), second.data_ptr(), cached.data_ptr()}
    pointers |= {row.data_ptr() for row in singles}
    assert len(pointers) == 3 + len(singles)
    for row in singles:  # a caller masking its row in place touches nobody else's
        row.fill_(0.0)
    assert torch.equal(first, want) and torch.equal(
        lm.cache.get(lm.make_request(prompts[0])), want[0]
    )


async def test_uncached_batch_rows_stay_out_of_the_cache(lm, copies):
    rows = await lm.batch_next_token_logprobs([[9, 9], [8, 8]], cache=False)
    assert copies[0] == 0 and len(lm.cache) == 0
    assert torch.equal(rows, expected(lm, [[9, 9], [8, 8]]))


async def test_a_failed_row_fails_the_batch_call_and_not_the_others(lm):
    class Bad(Exception):
        pass

    inner = lm.compute_batch

    def failing(requests):
        if any(r.token_ids == (66,) for r in requests):
            raise Bad("boom")
        return inner(requests)

    lm.compute_batch = failing
    bad = asyncio.ensure_future(lm.batch_next_token_logprobs([[66], [67]]))
    good = asyncio.ensure_future(lm.next_token_logprobs([68]))
    with pytest.raises(Bad):
        await bad
    assert torch.equal(await good, expected(lm, [[68]])[0])


async def test_variants_share_the_worker_thread_and_close_together():
    threads = {}

    def fn(name):
        def run(keys):
            threads[name] = threading.current_thread()
            return [k * 2 for k in keys]

        return run

    batchers = LoopBatchers(fn("plain"), name="vars", variants={"other": (fn("other"), {})})
    assert await batchers.get().submit(2) == 4
    assert await batchers.get("other").submit(3) == 6
    assert batchers.get("other") is not batchers.get() and threads["plain"] is threads["other"]
    pending = asyncio.ensure_future(batchers.get("other").submit(5))
    await asyncio.sleep(0)
    await batchers.aclose(drain=True)  # drains the variant's call too
    assert await pending == 10
    assert batchers.get().closed is False  # a new batcher after close, as before
    batchers.close()


async def test_a_batch_calls_result_memory_serves_a_later_call_once_dropped(lm):
    def prompts(last):
        return [[i + 1, last] for i in range(4)]

    await lm.batch_next_token_logprobs(prompts(2))  # (a shape's first result is not pooled)
    first = await lm.batch_next_token_logprobs(prompts(3))
    address = first.data_ptr()
    kept = await lm.batch_next_token_logprobs(prompts(5))  # the first is alive: apart
    assert kept.data_ptr() != address
    del first  # (a sampler drops the last step's rows)
    again = await lm.batch_next_token_logprobs(prompts(6))
    assert again.data_ptr() == address  # the same warm memory, rewritten
    assert torch.equal(again, expected(lm, prompts(6)))
    assert torch.equal(kept, expected(lm, prompts(5)))  # untouched by the later calls
    values = again.clone()
    lm.cleanup()  # the pool lets go of its free memory; results in use stay valid
    assert torch.equal(again, values)

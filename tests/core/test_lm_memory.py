"""BatchedAsyncLM's default output cache is bounded in bytes, and so is resident memory.

The issue this guards: with only an entry bound (4096 rows), a backend's cache grew to
0.8 GiB for GPT-2's vocabulary and 2 GiB for Llama-3's. A third-party backend
inherits the core's default, so the default must be a byte budget.
"""

import asyncio
import gc
import math
import sys
from pathlib import Path

import pytest

from genlm_core.lm import DEFAULT_CACHE_BYTES, BatchedAsyncLM
from genlm_core.testing import ByteTokenizer

GPT2_WIDTH = 50_257


class WideLM(BatchedAsyncLM):
    """A uniform model as wide as GPT-2's vocabulary; rows cost a memset, not a model."""

    def __init__(self, **kwargs):
        super().__init__(ByteTokenizer(), vocab_size=GPT2_WIDTH, **kwargs)

    def compute_batch(self, requests):
        rows = self.row_pool.empty_rows(len(requests))
        for row in rows:
            row.fill_(-math.log(GPT2_WIDTH))
        return rows


def rss_bytes() -> int:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    import resource

    return pages * resource.getpagesize()


def test_default_cache_is_a_byte_budget():
    lm = WideLM()
    assert lm.cache.max_bytes == DEFAULT_CACHE_BYTES == 256 << 20
    lm.cleanup()


@pytest.mark.skipif(sys.platform != "linux", reason="reads resident memory from /proc (Linux)")
def test_resident_memory_stays_within_the_default_budget_over_a_long_run():
    lm = WideLM()
    row_bytes = lm.row_pool.row_bytes
    requests = 3 * DEFAULT_CACHE_BYTES // row_bytes  # three budgets' worth of distinct rows
    batch = lm.batch_size

    async def run(start: int, stop: int) -> None:
        for first in range(start, stop, batch):
            prompts = [[i % 256, i // 256 % 256, i // 65536] for i in range(first, first + batch)]
            await lm.batch_next_token_logprobs(prompts)

    asyncio.run(run(0, batch))  # worker thread, pools and allocator warmed up
    gc.collect()
    before = rss_bytes()
    asyncio.run(run(batch, requests))
    gc.collect()
    grown = rss_bytes() - before
    info = lm.output_cache_info()
    lm.cleanup()
    assert info["bytes"] <= DEFAULT_CACHE_BYTES
    # cached rows, plus free rows kept within what the budget leaves, plus one batch
    assert info["bytes"] + info["free_row_bytes"] <= DEFAULT_CACHE_BYTES + batch * row_bytes
    allowed = DEFAULT_CACHE_BYTES + batch * row_bytes + (32 << 20)  # + allocator slack
    assert grown <= allowed, f"RSS grew {grown / 2**20:.0f} MiB over {requests} requests"

"""Decode steps replayed from captured graphs (issue 42, point 2): `genlm_hf._graphs`.

On a CPU the capture is the eager stand-in (``eager_capture``: a replay runs the step
again), so everything around a CUDA graph is tested here: bucket choice, static
buffers filled by one copy, padding rows on the dummy slot, key-width buckets, the
eager path for multi-token rows, recapture when the pool moves. The cuda-marked test
captures real CUDA graphs and compares with the gather path.
"""

from __future__ import annotations

import asyncio
import os
import random
from typing import Any

import pytest
import torch
from session_requires import require

require("genlm_hf.lm", reason="genlm-hf is not installed")

from tiny_architectures import ARCHITECTURES, arch_model, bf16_tolerance  # noqa: E402

from genlm_hf._graphs import MIN_KV_WIDTH, DecodeGraphs, eager_capture  # noqa: E402
from genlm_hf.lm import AsyncTransformer  # noqa: E402

ATOL = 2e-5
GPU = os.environ.get("GENLM_TEST_GPU", "cuda")


def with_eager_graphs(model: Any, gpt2_tokenizer: Any, batch_size: int = 64) -> AsyncTransformer:
    """An in-place model whose decode steps go through `DecodeGraphs`, captured eagerly."""
    lm = AsyncTransformer(model, gpt2_tokenizer, kv_reads="in_place", batch_size=batch_size)
    in_place = lm._in_place  # white-box: a CPU model gets no graphs of its own
    in_place._graphs = DecodeGraphs(
        model, in_place._layout, capture=eager_capture, max_batch=batch_size
    )
    return lm


async def sample(lm: AsyncTransformer, prompts: list[list[int]], steps: int) -> list[torch.Tensor]:
    """Each context extended by its row's argmax, ``steps`` times; every row returned."""
    contexts = [list(p) for p in prompts]
    rows: list[torch.Tensor] = []
    for _ in range(steps):
        out = await asyncio.gather(*(lm.next_token_logprobs(c) for c in contexts))
        rows += out
        for context, row in zip(contexts, out, strict=True):
            context.append(int(row.argmax()))
    return rows


def prompts(n: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    shared = [rng.randrange(vocab) for _ in range(length // 2)]
    return [shared + [rng.randrange(vocab) for _ in range(length - len(shared))] for _ in range(n)]


@pytest.mark.parametrize("arch", ["llama", "gemma2", "gpt2"])
@pytest.mark.parametrize("particles", [1, 3, 17])
async def test_replayed_steps_equal_the_gather_path(
    arch: str, particles: int, gpt2_tokenizer: Any
) -> None:
    model = arch_model(arch, len(gpt2_tokenizer), torch.float32, "cpu")
    graphed, plain = (
        with_eager_graphs(model, gpt2_tokenizer),
        AsyncTransformer(model, gpt2_tokenizer),
    )
    start = prompts(particles, 12, len(plain.byte_vocab))
    for row, expected in zip(
        await sample(graphed, start, 4), await sample(plain, start, 4), strict=True
    ):
        torch.testing.assert_close(row, expected, atol=ATOL, rtol=0)
    # the prompts' prefill is multi-token (eager); then one bucket, one key width
    assert graphed._in_place._graphs.captures == 1
    graphed.cleanup()
    plain.cleanup()


async def test_buckets_and_key_widths(gpt2_tokenizer: Any) -> None:
    model = arch_model("llama", len(gpt2_tokenizer), torch.float32, "cpu")
    lm = with_eager_graphs(model, gpt2_tokenizer, batch_size=8)
    graphs = lm._in_place._graphs
    vocab = len(lm.byte_vocab)
    await sample(lm, prompts(3, 10, vocab), 2)  # bucket 4
    await sample(lm, prompts(4, 10, vocab, seed=1), 2)  # bucket 4 again: replayed
    assert graphs.captures == 1
    await sample(lm, prompts(6, 10, vocab, seed=2), 2)  # bucket 8 (= batch_size)
    assert graphs.captures == 2
    long = prompts(2, MIN_KV_WIDTH + 5, vocab, seed=3)  # keys past the first width
    rows = await sample(lm, long, 2)
    assert graphs.captures == 3
    for row, context in zip(rows[:2], long, strict=True):
        torch.testing.assert_close(row, lm.next_token_logprobs_uncached(context), atol=ATOL, rtol=0)
    lm.cleanup()


async def test_a_moved_pool_is_captured_again(gpt2_tokenizer: Any) -> None:
    model = arch_model("llama", len(gpt2_tokenizer), torch.float32, "cpu")
    lm = with_eager_graphs(model, gpt2_tokenizer)
    graphs = lm._in_place._graphs
    await sample(lm, prompts(2, 8, len(lm.byte_vocab)), 2)
    assert graphs.captures == 1
    lm.kv_cache.clear()  # frees the pool: the next one is a new tensor
    rows = await sample(lm, [[5, 6, 7]], 3)
    assert graphs.captures == 2
    context = [5, 6, 7, int(rows[0].argmax()), int(rows[1].argmax())]
    torch.testing.assert_close(rows[2], lm.next_token_logprobs_uncached(context), atol=ATOL, rtol=0)
    lm.cleanup()


def test_cuda_graphs_need_cuda_and_in_place(gpt2_tokenizer: Any) -> None:
    model = arch_model("llama", len(gpt2_tokenizer), torch.float32, "cpu")
    with pytest.raises(ValueError, match=r"cuda_graphs=True replays in-place decode steps"):
        AsyncTransformer(model, gpt2_tokenizer, kv_reads="in_place", cuda_graphs=True)
    with pytest.raises(ValueError, match=r"kv_reads='gather'"):
        AsyncTransformer(model, gpt2_tokenizer, cuda_graphs=True)
    lm = AsyncTransformer(model, gpt2_tokenizer, kv_reads="in_place")
    assert lm._in_place._graphs is None  # None on a CPU: no graphs
    lm.cleanup()


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("arch", list(ARCHITECTURES))
async def test_cuda_graphs_equal_the_gather_path(
    arch: str, dtype: torch.dtype, gpt2_tokenizer: Any
):
    model = arch_model(arch, len(gpt2_tokenizer), dtype, GPU)
    graphed = AsyncTransformer(model, gpt2_tokenizer, kv_reads="in_place")
    plain = AsyncTransformer(model, gpt2_tokenizer)
    assert graphed._in_place._graphs is not None
    start = prompts(5, 12, len(plain.byte_vocab))
    # greedy choices could differ on a near-tie in bfloat16: both follow the plain path's
    contexts = [list(p) for p in start]
    for _ in range(4):
        ours = await asyncio.gather(*(graphed.next_token_logprobs(c) for c in contexts))
        theirs = await asyncio.gather(*(plain.next_token_logprobs(c) for c in contexts))
        for row, expected in zip(ours, theirs, strict=True):
            bound = 1e-4 if dtype == torch.float32 else bf16_tolerance(expected)
            assert (row - expected).abs().max().item() <= bound
        for context, row in zip(contexts, theirs, strict=True):
            context.append(int(row.argmax()))
    assert graphed._in_place._graphs.captures >= 1
    graphed.cleanup()
    plain.cleanup()

"""``AsyncTransformer(kv_reads="in_place")``: forwards that read and write the slot pool.

The same requests through both paths must give the same rows (float32, a few ulps:
other kernels, other accumulation order) and leave the prefix cache holding the same
prefixes, on every architecture the cache serves, under eviction, with rows sharing
new tokens, and when a forward fails half-way.
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

from genlm_hf.lm import AsyncTransformer  # noqa: E402

ATOL = 2e-5
#: The GPU the cuda-marked tests use (as in tests/hf/test_cuda.py).
GPU = os.environ.get("GENLM_TEST_GPU", "cuda")


def waves(vocab: int, seed: int = 0) -> list[list[list[int]]]:
    """A sampler's requests in three concurrent waves: branches, extensions, repeats."""
    rng = random.Random(seed)
    base = [rng.randrange(vocab) for _ in range(24)]
    first = [base[:n] for n in (1, 4, 9, 16, 24)] + [base[:9] + [rng.randrange(vocab)]]
    second = [p + [rng.randrange(vocab)] for p in first] + [base[:9] + [1, 2, 3]]
    third = [p + [rng.randrange(vocab), rng.randrange(vocab)] for p in second] + [base[:4]]
    return [first, second, third]


async def answer(lm: AsyncTransformer, requests: list[list[list[int]]]) -> list[torch.Tensor]:
    rows: list[torch.Tensor] = []
    for wave in requests:
        rows += await asyncio.gather(*(lm.next_token_logprobs(p) for p in wave))
    return rows


def both(model: Any, gpt2_tokenizer: Any, **opts: Any) -> tuple[AsyncTransformer, AsyncTransformer]:
    return (
        AsyncTransformer(model, gpt2_tokenizer, kv_reads="in_place", **opts),
        AsyncTransformer(model, gpt2_tokenizer, **opts),
    )


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
async def test_in_place_rows_and_cache_equal_the_gather_paths(
    arch: str, gpt2_tokenizer: Any
) -> None:
    model = arch_model(arch, len(gpt2_tokenizer), torch.float32, "cpu")
    in_place, gather = both(model, gpt2_tokenizer)
    requests = waves(len(in_place.byte_vocab))
    for row, expected in zip(
        await answer(in_place, requests), await answer(gather, requests), strict=True
    ):
        torch.testing.assert_close(row, expected, atol=ATOL, rtol=0)
    ours, theirs = in_place.kv_cache_stats, gather.kv_cache_stats
    assert (ours.tokens, ours.hits, ours.hit_tokens) == (
        theirs.tokens,
        theirs.hits,
        theirs.hit_tokens,
    )
    assert ours.bytes == theirs.bytes + in_place.bytes_per_token  # (+ the padding's dummy slot)
    in_place.cleanup()
    gather.cleanup()


async def test_rows_sharing_new_tokens_store_them_once(gpt2_tokenizer: Any) -> None:
    model = arch_model("llama", len(gpt2_tokenizer), torch.float32, "cpu")
    in_place, gather = both(model, gpt2_tokenizer)
    past = [7, 8, 9, 10]
    for lm in (in_place, gather):
        await lm.next_token_logprobs(past)
        # two rows whose new tokens start alike: [11, 12] is computed by both
        await asyncio.gather(*(lm.next_token_logprobs(past + [11, 12, x]) for x in (13, 14)))
    assert in_place.kv_cache_stats.tokens == gather.kv_cache_stats.tokens == 4 + 2 + 2
    row = await in_place.next_token_logprobs(past + [11, 12, 13, 15])  # reads the shared part
    torch.testing.assert_close(row, in_place.next_token_logprobs_uncached(past + [11, 12, 13, 15]))
    in_place.cleanup()
    gather.cleanup()


async def test_under_eviction_rows_stay_exact(gpt2_tokenizer: Any) -> None:
    """A pool of 32 slots: reservations evict older prefixes; one that cannot fit is refused."""
    model = arch_model("qwen2", len(gpt2_tokenizer), torch.float32, "cpu")
    probe = AsyncTransformer(model, gpt2_tokenizer)
    per_token = probe.bytes_per_token
    probe.cleanup()
    # the budget holds the pool (half of it here), the reused buffer and the reserve
    lm = AsyncTransformer(model, gpt2_tokenizer, kv_reads="in_place", kv_cache_bytes=64 * per_token)
    assert lm.kv_cache.max_bytes == 32 * per_token
    reserve, refused = lm.kv_cache.reserve, []

    def counted(*args: Any) -> Any:
        out = reserve(*args)
        refused.append(out is None)
        return out

    lm.kv_cache.reserve = counted  # type: ignore[method-assign]
    rng = random.Random(5)
    prompts = [[rng.randrange(len(lm.byte_vocab)) for _ in range(12)] for _ in range(8)]
    prompts += [p + [7] for p in prompts[::2]] + [list(range(1, 41))]  # the last: 40 > 32 slots
    for prompt in prompts:  # one at a time: each reservation needs room of its own
        row = await lm.next_token_logprobs(prompt)
        torch.testing.assert_close(row, lm.next_token_logprobs_uncached(prompt), atol=ATOL, rtol=0)
    stats = lm.kv_cache_stats
    assert stats.bytes <= stats.max_bytes and stats.evictions > 0
    assert refused == [False] * (len(prompts) - 1) + [True]  # that one went the gather path
    lm.cleanup()


async def test_a_failed_forward_gives_its_slots_back(gpt2_tokenizer: Any) -> None:
    model = arch_model("llama", len(gpt2_tokenizer), torch.float32, "cpu")
    lm = AsyncTransformer(model, gpt2_tokenizer, kv_reads="in_place")
    await lm.next_token_logprobs([1, 2, 3])
    held = lm.kv_cache_stats.bytes
    forward = type(model).forward

    def broken(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("out of memory (simulated)")

    type(model).forward = broken
    try:
        with pytest.raises(RuntimeError, match="simulated"):
            await lm.next_token_logprobs([1, 2, 3, 4, 5])
    finally:
        type(model).forward = forward
    assert lm.kv_cache_stats.bytes == held  # the reserved slots went back
    row = await lm.next_token_logprobs([1, 2, 3, 4, 5])
    torch.testing.assert_close(row, lm.next_token_logprobs_uncached([1, 2, 3, 4, 5]))
    assert model.config._attn_implementation != "genlm_pool"  # put back after the failure
    lm.cleanup()


def test_kv_reads_is_checked(gpt2_tokenizer: Any) -> None:
    model = arch_model("llama", len(gpt2_tokenizer), torch.float32, "cpu")
    with pytest.raises(ValueError, match=r"kv_reads must be one of \('gather', 'in_place'\)"):
        AsyncTransformer(model, gpt2_tokenizer, kv_reads="paged")
    with pytest.raises(ValueError, match=r"prefix cache, which is off .* pass kv_reads='gather'"):
        AsyncTransformer(model, gpt2_tokenizer, kv_reads="in_place", kv_cache_bytes=0)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("arch", list(ARCHITECTURES))
async def test_in_place_equals_gather_on_cuda(
    arch: str, dtype: torch.dtype, gpt2_tokenizer: Any
) -> None:
    """On the GPU: the same rows as the gather path (float32 1e-4; bfloat16 two ulps)."""
    model = arch_model(arch, len(gpt2_tokenizer), dtype, GPU)
    in_place, gather = both(model, gpt2_tokenizer)
    requests = waves(len(in_place.byte_vocab), seed=7)
    ours, theirs = await answer(in_place, requests), await answer(gather, requests)
    worst = 0.0
    for row, expected in zip(ours, theirs, strict=True):
        gap = (row - expected).abs().max().item()
        bound = 1e-4 if dtype == torch.float32 else bf16_tolerance(expected)
        assert gap <= bound, (gap, bound)
        worst = max(worst, gap)
    assert in_place.kv_cache_stats.tokens == gather.kv_cache_stats.tokens
    print(f"{arch} {dtype} {GPU}: worst |in_place - gather| = {worst:.3g}")
    in_place.cleanup()
    gather.cleanup()

"""AsyncTransformer: the conformance suite and the correctness bars of issue 3.

The reference for every log-prob is ``next_token_logprobs_uncached``: one plain
forward of the whole prompt, batch of one, no cache, no padding.
"""

from __future__ import annotations

import asyncio
import gc
import random

import pytest
import torch

from genlm_core.errors import InvalidTokenIdsError
from genlm_core.testing import AsyncLMConformance

ATOL = 1e-4


# -- conformance -----------------------------------------------------------------------


class TestTinyGPT2Conformance(AsyncLMConformance):
    @pytest.fixture
    def lm(self, hf_models):
        model = hf_models("tiny-gpt2").lm()
        yield model
        model.cleanup()


class TestTinyLlama3Conformance(AsyncLMConformance):
    @pytest.fixture
    def lm(self, hf_models):
        model = hf_models("tiny-llama3").lm()
        yield model
        model.cleanup()


@pytest.mark.slow
class TestSmolLM2Conformance(AsyncLMConformance):
    # fp32 over 30 layers: batch shape changes BLAS blocking, log-probs of -20 then move by
    # a few 1e-5 (relative ~2e-6). The bar for batched vs single is 1e-4.
    atol = ATOL

    @pytest.fixture
    def lm(self, hf_models):
        model = hf_models("smollm2").lm()
        yield model
        model.cleanup()


# -- random prompt trees vs uncached forwards --------------------------------------------


def prompt_tree(seed: int, vocab: int, n: int, max_len: int = 200) -> list[list[int]]:
    """Prompts with shared prefixes (a random tree), duplicates, lengths 1..max_len."""
    rng = random.Random(seed)
    prompts: list[list[int]] = [[rng.randrange(vocab)]]
    while len(prompts) < n:
        r = rng.random()
        if r < 0.15:  # duplicate
            prompts.append(list(rng.choice(prompts)))
            continue
        parent = rng.choice(prompts)
        if r < 0.5:  # extend a prompt by a few tokens
            cut = len(parent)
            extra = rng.randrange(1, 6)
        elif r < 0.8:  # branch off inside a prompt
            cut = rng.randrange(0, len(parent) + 1)
            extra = rng.randrange(1, 40)
        else:  # a long jump
            cut = rng.randrange(0, len(parent) + 1)
            extra = rng.randrange(40, 120)
        new = parent[:cut] + [rng.randrange(vocab) for _ in range(extra)]
        prompts.append(new[:max_len])
    prompts.append([rng.randrange(vocab) for _ in range(max_len)])  # the longest length
    return prompts


async def check_against_uncached(lm, prompts: list[list[int]], seed: int) -> float:
    """Query ``prompts`` in random concurrent waves; return the worst deviation."""
    rng = random.Random(seed)
    order = list(range(len(prompts)))
    rng.shuffle(order)
    worst = 0.0
    start = 0
    while start < len(order):
        size = rng.randrange(1, 16)
        wave = order[start : start + size]
        start += size
        outs = await asyncio.gather(*(lm.next_token_logprobs(prompts[i]) for i in wave))
        for i, out in zip(wave, outs, strict=True):
            ref = lm.next_token_logprobs_uncached(prompts[i])
            worst = max(worst, (out - ref).abs().max().item())
    return worst


@pytest.mark.parametrize(
    "key, n",
    [("tiny-gpt2", 120), ("tiny-llama3", 120), pytest.param("smollm2", 40, marks=pytest.mark.slow)],
)
async def test_random_trees_equal_uncached(hf_models, key, n, thorough):
    """``n`` prompts per tree with ``--slow``, half as many by default."""
    lm = hf_models(key).lm()
    vocab = len(lm.byte_vocab)
    for seed in range(2):
        prompts = prompt_tree(seed, vocab, n if thorough else n // 2)
        assert {len(p) for p in prompts} >= {1, 200}
        assert len({tuple(p) for p in prompts}) < len(prompts)  # has duplicates
        assert await check_against_uncached(lm, prompts, seed) < ATOL
        lm.cache.clear()  # keep the K/V cache: the next tree reuses and extends it
    stats = lm.kv_cache_stats
    assert stats.hits > 0 and stats.hit_tokens > 0
    lm.cleanup()


async def test_incremental_steps_reuse_kv_and_match(hf_models):
    """A sampler's pattern: each call extends the previous one by one token."""
    lm = hf_models("tiny-llama3").lm()
    rng = random.Random(3)
    vocab = len(lm.byte_vocab)
    contexts = [[rng.randrange(vocab) for _ in range(7)] for _ in range(5)]
    for _ in range(12):
        outs = await asyncio.gather(*(lm.next_token_logprobs(c) for c in contexts))
        for c, out in zip(contexts, outs, strict=True):
            torch.testing.assert_close(out, lm.next_token_logprobs_uncached(c), atol=ATOL, rtol=0)
            c.append(rng.randrange(vocab))
    stats = lm.kv_cache_stats
    assert stats.hits >= 5 * 11  # every step after the first reuses the previous one
    assert stats.tokens == 5 * (7 + 11)  # each position stored once (the last is not yet)
    lm.cleanup()


# -- eviction and budgets ----------------------------------------------------------------


@pytest.mark.parametrize("one_row_per_forward", [False, True])
@pytest.mark.parametrize("key", ["tiny-gpt2", "tiny-llama3"])
async def test_results_unchanged_after_eviction(hf_models, key, one_row_per_forward, thorough):
    """A tight budget evicts all the time, also between the forwards of one batch.

    80 prompts with ``--slow``, 40 by default: both trees need many times the budget.
    """
    loaded = hf_models(key)
    probe = loaded.lm()
    per_token = _bytes_per_token(probe)
    probe.cleanup()
    budget = 40 * per_token  # far less than the trees need
    split = {"max_batch_kv_bytes": 1} if one_row_per_forward else {}
    lm = loaded.lm(kv_cache_bytes=budget, cache_size=0, **split)
    prompts = prompt_tree(11, len(lm.byte_vocab), 80 if thorough else 40)
    assert await check_against_uncached(lm, prompts, 11) < ATOL
    stats = lm.kv_cache_stats
    assert stats.evictions > 0
    assert stats.bytes <= budget
    # and again, now that the cache holds an arbitrary survivor set
    assert await check_against_uncached(lm, prompts, 12) < ATOL
    lm.cleanup()


def _bytes_per_token(lm) -> int:
    lm.next_token_logprobs_sync([1, 2])
    stats = lm.kv_cache_stats
    return stats.bytes // stats.tokens


async def test_kv_cache_disabled_still_correct(hf_models):
    lm = hf_models("tiny-gpt2").lm(kv_cache_bytes=0)
    assert lm.kv_reuse_off_reason == "kv_cache_bytes=0"
    prompts = prompt_tree(5, len(lm.byte_vocab), 40)
    assert await check_against_uncached(lm, prompts, 5) < ATOL
    assert lm.kv_cache_stats.bytes == 0
    lm.cleanup()


async def test_small_forward_budget_splits_batches(hf_models):
    """A K/V buffer cap smaller than one row forces one forward per request."""
    lm = hf_models("tiny-llama3").lm(max_batch_kv_bytes=1)
    prompts = prompt_tree(6, len(lm.byte_vocab), 40)
    assert await check_against_uncached(lm, prompts, 6) < ATOL
    lm.cleanup()


async def test_output_cache_is_byte_bounded(hf_models):
    budget = 3 * (50257 * 4 + 512)  # three rows and their keys (a short prompt's: ~120 B)
    lm = hf_models("tiny-gpt2").lm(cache_bytes=budget)
    prompts = [[i + 1] for i in range(10)]
    await lm.batch_next_token_logprobs(prompts)
    info = lm.cache_info()
    assert info["outputs"]["entries"] == 3
    assert info["outputs"]["bytes"] <= budget
    lm.cleanup()


async def test_clear_cache_empties_both(hf_models):
    lm = hf_models("tiny-gpt2").lm()
    await lm.next_token_logprobs([1, 2, 3])
    assert lm.kv_cache_stats.bytes > 0 and len(lm.cache) == 1
    lm.clear_cache()
    assert lm.kv_cache_stats.bytes == 0 and lm.kv_cache_stats.entries == 0 and len(lm.cache) == 0
    lm.cleanup()


async def settled(done, seconds: float = 5.0) -> None:
    """Collect garbage until ``done()``: a thread that ran the batch may still be
    finishing (its frames let go of the rows a moment after the callers got them)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        gc.collect()
        if done() or loop.time() > deadline:
            return
        await asyncio.sleep(0.01)


async def test_recomputed_rows_reuse_freed_memory_and_match(hf_models):
    lm = hf_models("tiny-gpt2").lm()
    prompts = [[i + 1, i + 2] for i in range(12)]
    first = (await lm.batch_next_token_logprobs(prompts)).clone()
    lm.clear_cache()
    await settled(lambda: lm.row_pool.stats().free_rows == 12)
    assert lm.row_pool.stats().free_rows == 12  # the dropped outputs' memory, kept
    again = await lm.batch_next_token_logprobs(prompts)
    assert lm.row_pool.stats().reused == 12
    torch.testing.assert_close(again, first, rtol=0, atol=1e-5)
    lm.cleanup()


# -- known values and limits -------------------------------------------------------------


@pytest.mark.slow
def test_smollm2_capital_of_france(hf_models):
    lm = hf_models("smollm2").lm()
    ids = lm.tokenizer.encode("The capital of France is")
    logprobs = lm.next_token_logprobs_sync(ids)
    best = int(logprobs.argmax())
    assert lm.byte_vocab[best] == b" Paris"
    assert logprobs[best].item() == pytest.approx(-0.258, abs=0.01)
    # plain transformers agrees
    loaded = hf_models("smollm2")
    with torch.inference_mode():
        logits = loaded.model(torch.tensor([ids])).logits[0, -1]
    assert torch.log_softmax(logits, -1)[best].item() == pytest.approx(
        logprobs[best].item(), abs=1e-4
    )
    lm.cleanup()


def test_prompt_longer_than_context(hf_models):
    lm = hf_models("tiny-gpt2").lm()  # n_positions = 512
    with pytest.raises(InvalidTokenIdsError, match="513 tokens.*512"):
        lm.next_token_logprobs_sync([1] * 513)
    assert lm.next_token_logprobs_sync([1] * 512).shape == (len(lm.byte_vocab),)
    lm.cleanup()


async def test_sync_and_async_callers_share_the_model(hf_models):
    """A sync call from another thread while async batches run: serialised, both right."""
    lm = hf_models("tiny-llama3").lm()
    prompts = prompt_tree(8, len(lm.byte_vocab), 30)

    def sync_side():
        return [lm.next_token_logprobs_sync(p) for p in prompts[::-1]]

    sync_task = asyncio.to_thread(sync_side)
    async_outs, sync_outs = await asyncio.gather(
        asyncio.gather(*(lm.next_token_logprobs(p) for p in prompts)), sync_task
    )
    for p, a, s in zip(prompts, async_outs, sync_outs[::-1], strict=True):
        ref = lm.next_token_logprobs_uncached(p)
        torch.testing.assert_close(a, ref, atol=ATOL, rtol=0)
        torch.testing.assert_close(s, ref, atol=ATOL, rtol=0)
    lm.cleanup()


# -- sampling ------------------------------------------------------------------------------


async def test_batch_sample_seeded_and_stops_at_eos(hf_models):
    lm = hf_models("tiny-gpt2").lm()
    prompts = [[10, 20], [30], [10, 20]]
    a = await lm.batch_sample(prompts, max_tokens=6, eos_token_ids=[], seed=4)
    lm.clear_cache()
    b = await lm.batch_sample(prompts, max_tokens=6, eos_token_ids=[], seed=4)
    assert a == b and all(len(s) == 6 for s in a)
    # stop at the first EOS: make the 3rd token of the first sample an EOS id
    eos = a[0][2]
    c = await lm.batch_sample(prompts, max_tokens=6, eos_token_ids=[eos], seed=4)
    assert c[0] == a[0][:2]
    for got, full in zip(c, a, strict=True):
        assert eos not in got and got == full[: len(got)]
    lm.cleanup()


async def test_shared_new_prefix_is_computed_once(hf_models):
    """Questions after one new system prompt: the prompt's K/V is computed and stored once."""
    lm = hf_models("tiny-llama3").lm()
    rng = random.Random(9)
    vocab = len(lm.byte_vocab)
    system = [rng.randrange(vocab) for _ in range(60)]
    branch = [rng.randrange(vocab) for _ in range(20)]  # a second shared level
    prompts = [system + [rng.randrange(vocab) for _ in range(5)] for _ in range(4)]
    prompts += [system + branch + [rng.randrange(vocab) for _ in range(3)] for _ in range(3)]
    prompts.append(system + branch)  # a request equal to a shared prefix
    outs = await asyncio.gather(*(lm.next_token_logprobs(p) for p in prompts))
    for p, out in zip(prompts, outs, strict=True):
        torch.testing.assert_close(out, lm.next_token_logprobs_uncached(p), atol=ATOL, rtol=0)
    # every distinct position stored once: 60 + 20 shared, plus each prompt's own tail
    assert lm.kv_cache_stats.tokens == 60 + 20 + 4 * 5 + 3 * 3
    lm.cleanup()


async def test_outputs_are_plain_tensors(hf_models):
    """Not inference-mode tensors: callers may update them in place (masking) or use autograd."""
    lm = hf_models("tiny-gpt2").lm(cache_size=0)
    out = await lm.next_token_logprobs([1, 2, 3])
    assert not out.is_inference() and not out.requires_grad
    out[0] = float("-inf")  # would raise for an inference tensor
    weights = torch.zeros_like(out, requires_grad=True)
    (out.clamp(min=-50) * weights).sum().backward()
    assert weights.grad is not None
    lm.cleanup()


@pytest.mark.parametrize("opt", ["kv_cache_bytes", "max_batch_kv_bytes"])
@pytest.mark.parametrize("bad", [-1, 1.5, "1GB"])
def test_budgets_validated(hf_models, opt, bad):
    with pytest.raises(ValueError, match=f"{opt} must be an integer >= 0"):
        hf_models("tiny-gpt2").lm(**{opt: bad})


def test_kv_budget_split_reserves_working_memory(hf_models):
    from genlm_hf._device import split_kv_budget

    mib = 1 << 20
    assert split_kv_budget(256 * mib, 256 * mib) == (64 * mib, 64 * mib)
    assert split_kv_budget(1024 * mib, 256 * mib) == (64 * mib, 64 * mib)
    assert split_kv_budget(100, 1) == (1, 25)
    lm = hf_models("tiny-gpt2").lm(kv_cache_bytes=256 * mib)
    assert lm.kv_cache_stats.max_bytes == 128 * mib  # 256 - 64 forward K/V - 64 reserve
    lm.cleanup()

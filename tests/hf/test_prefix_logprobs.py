"""AsyncTransformer.prefix_next_token_logprobs: one forward per sequence, caches filled.

The conformance suite (test_lm.py) checks rows against per-prefix next-token calls;
here: against the uncached reference forward, how many forwards run, what lands in
the two caches, chunking, eviction and LoRA.
"""

from __future__ import annotations

import asyncio
import random

import pytest
import torch

import genlm_hf.prefixes as hf_prefixes

ATOL = 1e-4


def uncached_rows(lm, ids, lora_name=None):
    return torch.stack(
        [lm.next_token_logprobs_uncached(ids[: i + 1], lora_name) for i in range(len(ids))]
    )


def count_forwards(lm):
    calls = []
    original = lm.model.forward

    def counting(*args, **kwargs):
        calls.append(kwargs.get("input_ids", args[0] if args else None).shape)
        return original(*args, **kwargs)

    lm.model.forward = counting
    return calls


def random_ids(lm, n, seed):
    rng = random.Random(seed)
    return [rng.randrange(len(lm.byte_vocab)) for _ in range(n)]


@pytest.mark.parametrize("key", ["tiny-gpt2", "tiny-llama3"])
async def test_one_forward_fills_both_caches(hf_models, key):
    lm = hf_models(key).lm()
    ids = random_ids(lm, 24, 0)
    forwards = count_forwards(lm)
    rows = await lm.prefix_next_token_logprobs(ids)
    assert forwards == [torch.Size([1, 24])]
    del lm.model.forward
    torch.testing.assert_close(rows, uncached_rows(lm, ids), atol=ATOL, rtol=0)
    assert lm.kv_cache_stats.tokens == 24  # every position's keys and values stored
    forwards = count_forwards(lm)
    for i in range(len(ids)):  # every prefix is an output-cache hit
        assert torch.equal(await lm.next_token_logprobs(ids[: i + 1]), rows[i])
    branch = ids[:15] + [7]  # branching off: only the new token runs
    out = await lm.next_token_logprobs(branch)
    assert forwards == [torch.Size([1, 1])]
    del lm.model.forward
    torch.testing.assert_close(out, lm.next_token_logprobs_uncached(branch), atol=ATOL, rtol=0)
    lm.cleanup()


async def test_extends_a_cached_prefix_and_batches_sequences(hf_models):
    lm = hf_models("tiny-gpt2").lm()
    a, b = random_ids(lm, 30, 1), random_ids(lm, 12, 2)
    await lm.next_token_logprobs(a[:20])  # K/V of a[:19] cached, row of a[:20] cached
    lm.cache.clear()
    forwards = count_forwards(lm)
    rows_a, rows_b = await asyncio.gather(
        lm.prefix_next_token_logprobs(a), lm.prefix_next_token_logprobs(b)
    )
    # a runs from position 0 (its rows are needed) but reuses nothing it cannot: one
    # padded forward holds both sequences
    assert len(forwards) == 1 and forwards[0][0] == 2
    del lm.model.forward
    torch.testing.assert_close(rows_a, uncached_rows(lm, a), atol=ATOL, rtol=0)
    torch.testing.assert_close(rows_b, uncached_rows(lm, b), atol=ATOL, rtol=0)
    # rows cached for the leading part are reused: only the tail is computed
    forwards = count_forwards(lm)
    longer = await lm.prefix_next_token_logprobs(a + [3, 4, 5])
    assert forwards == [torch.Size([1, 3])]
    del lm.model.forward
    torch.testing.assert_close(longer[:30], rows_a, atol=0, rtol=0)
    torch.testing.assert_close(longer, uncached_rows(lm, a + [3, 4, 5]), atol=ATOL, rtol=0)
    lm.cleanup()


async def test_long_sequences_are_chunked(hf_models, monkeypatch):
    lm = hf_models("tiny-gpt2").lm()
    row_bytes = len(lm.byte_vocab) * 4
    monkeypatch.setattr(
        hf_prefixes, "PREFIX_LOGITS_BYTES", 16 * row_bytes
    )  # 16 positions a forward
    ids = random_ids(lm, 50, 3)
    forwards = count_forwards(lm)
    rows = await lm.prefix_next_token_logprobs(ids)
    assert [f[1] for f in forwards] == [16, 16, 16, 2]
    del lm.model.forward
    torch.testing.assert_close(rows, uncached_rows(lm, ids), atol=ATOL, rtol=0)
    lm.cleanup()


async def test_correct_under_eviction_and_without_kv_reuse(hf_models):
    loaded = hf_models("tiny-gpt2")
    tight = loaded.lm(kv_cache_bytes=64 << 10)  # a few dozen positions: evicts mid-batch
    off = loaded.lm(kv_cache_bytes=0)
    seqs = [random_ids(tight, 30, s) for s in range(4)]
    wants = [uncached_rows(off, s) for s in seqs]
    for lm in (tight, off):
        outs = await asyncio.gather(*(lm.prefix_next_token_logprobs(s) for s in seqs))
        for want, rows in zip(wants, outs, strict=True):
            torch.testing.assert_close(rows, want, atol=ATOL, rtol=0)
    assert tight.kv_cache_stats.evictions > 0
    tight.cleanup()
    off.cleanup()


@pytest.mark.slow
async def test_smollm2_text(hf_models):
    lm = hf_models("smollm2").lm()
    ids = lm.tokenizer.encode("The capital of France is Paris, and the capital of Italy is Rome.")
    rows = await lm.prefix_next_token_logprobs(ids)
    torch.testing.assert_close(rows, uncached_rows(lm, ids), atol=ATOL, rtol=0)
    paris = lm.tokenizer.encode(" Paris")[0]
    assert ids[5] == paris and rows[4, paris] > -1.0  # ' Paris' after "... is"
    lm.cleanup()


async def test_start_runs_only_the_new_tokens(hf_models):
    lm = hf_models("tiny-gpt2").lm()
    context, text = random_ids(lm, 20, 4), random_ids(lm, 6, 5)
    await lm.next_token_logprobs(context)  # a beam state's context, materialized
    lm.cache.clear()  # even with its rows evicted, the context is not recomputed
    forwards = count_forwards(lm)
    rows = await lm.prefix_next_token_logprobs(context + text, start=len(context))
    assert forwards == [torch.Size([1, 6])]
    del lm.model.forward
    want = uncached_rows(lm, context + text)[len(context) :]
    torch.testing.assert_close(rows, want, atol=ATOL, rtol=0)
    lm.cleanup()

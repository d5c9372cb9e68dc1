"""AsyncVirtualLM on vLLM: the conformance suite and agreement with the hf backend.

The reference is genlm-hf's AsyncTransformer on the same fp32 weights; the bar is
1e-3 (observed: ~1e-4, the difference between vLLM's and torch's CPU kernels).
"""

from __future__ import annotations

import asyncio
import random

import pytest
from session_requires import require

require("vllm", reason="vLLM is not installed (nox -s vllm installs it)")

import torch  # noqa: E402

from genlm_core.errors import InvalidTokenIdsError  # noqa: E402
from genlm_core.testing import AsyncLMConformance  # noqa: E402
from genlm_vllm.errors import EngineOutputError  # noqa: E402

#: torch warns about its own jit decorators when vLLM's dependencies import them.
pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"
)

ATOL = 1e-3


# -- conformance -----------------------------------------------------------------------


class TestSmolLM2Conformance(AsyncLMConformance):
    # vLLM's CPU kernels pick their blocking by batch shape: rows of one prompt computed
    # in different batches differ by ~1e-5 (relative ~1e-6) in fp32.
    atol = 1e-4

    @pytest.fixture
    def lm(self, engines):
        model = engines("smollm2").lm()
        yield model
        model.cleanup()


class TestTinyLlamaConformance(AsyncLMConformance):
    atol = 1e-4

    @pytest.fixture
    def lm(self, engines):
        model = engines("tiny").lm()
        yield model
        model.cleanup()


# -- agreement with the hf backend -------------------------------------------------------


def prompt_set(seed: int, vocab: int, n: int) -> list[list[int]]:
    """Prompts sharing prefixes, with duplicates and lengths 1..~150."""
    rng = random.Random(seed)
    trunk = [rng.randrange(vocab) for _ in range(120)]
    prompts = []
    for i in range(n):
        r = i % 4
        if r == 0:  # a prefix of the trunk
            prompts.append(trunk[: rng.randrange(1, len(trunk) + 1)])
        elif r == 1:  # the trunk plus a branch
            prompts.append(trunk[: rng.randrange(1, 60)] + [rng.randrange(vocab)] * (i % 5 + 1))
        elif r == 2:  # unrelated
            prompts.append([rng.randrange(vocab) for _ in range(rng.randrange(1, 40))])
        else:  # a duplicate
            prompts.append(list(prompts[rng.randrange(len(prompts))]))
    return prompts


def assert_agree(outs, ref) -> None:
    assert len(outs) == len(ref)
    for i, (a, b) in enumerate(zip(outs, ref, strict=True)):
        err = (a - b).abs().max().item()
        assert err < ATOL, f"row {i}: max |vllm - hf| = {err}"


@pytest.mark.parametrize("key", ["smollm2", "tiny"])
async def test_concurrent_calls_beyond_max_num_seqs_match_hf(engines, hf_reference, key):
    """20 concurrent callers on an engine with max_num_seqs=4: every row, right row."""
    engine = engines(key)
    assert engine.llm.llm_engine.vllm_config.scheduler_config.max_num_seqs == 4
    lm = engine.lm()
    hf = hf_reference(key)
    prompts = prompt_set(0, len(lm.byte_vocab), 20)
    outs = await asyncio.gather(*(lm.next_token_logprobs(p) for p in prompts))
    ref = await hf.batch_next_token_logprobs(prompts)
    assert_agree(outs, ref)
    lm.cleanup()


@pytest.mark.parametrize("key", ["smollm2", "tiny"])
def test_one_batch_of_many_distinct_prompts_matches_hf(engines, hf_reference, key):
    """One compute_batch of 40 distinct prompts (10x max_num_seqs), rows in order."""
    lm = engines(key).lm(cache_size=0)
    prompts = prompt_set(1, len(lm.byte_vocab), 60)
    prompts = list(dict.fromkeys(map(tuple, prompts)))[:40]
    assert len(prompts) == 40
    outs = lm.batch_next_token_logprobs_sync(prompts)
    ref = hf_reference(key).batch_next_token_logprobs_sync(prompts)
    assert_agree(list(outs), list(ref))
    lm.cleanup()


async def test_shared_prefix_rows_are_exact_after_prefix_cache_hits(engines, hf_reference):
    """Prompts longer than a KV block (128 on CPU), asked twice: cache hits stay exact."""
    lm = engines("smollm2").lm(cache_size=0)
    rng = random.Random(5)
    trunk = [rng.randrange(len(lm.byte_vocab)) for _ in range(300)]
    prompts = [trunk[:n] for n in (129, 200, 256, 257, 300)] + [trunk[:140] + [7, 8]]
    first = await lm.batch_next_token_logprobs(prompts)
    second = await lm.batch_next_token_logprobs(prompts)
    ref = await hf_reference("smollm2").batch_next_token_logprobs(prompts)
    assert_agree(list(first), list(ref))
    assert_agree(list(second), list(ref))
    lm.cleanup()


# -- sampling ----------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.01, 1e-6])
async def test_near_greedy_sample_follows_argmax_of_logprobs(engines, temperature):
    """0.01: vLLM's sampler (its lowest temperature); 1e-6: the exact token-by-token path."""
    lm = engines("smollm2").lm()
    prompt = lm.tokenizer.encode("The capital of France is")
    sampled = await lm.sample(prompt, max_tokens=4, eos_token_ids=[], temperature=temperature)
    greedy: list[int] = []
    for _ in range(4):
        greedy.append(int((await lm.next_token_logprobs(prompt + greedy)).argmax()))
    assert sampled == greedy
    lm.cleanup()


async def test_batch_sample_seeds_per_prompt(engines):
    lm = engines("tiny").lm()
    prompts = [[1, 5, 6], [1, 5, 6], [1, 9]]
    a = await lm.batch_sample(prompts, max_tokens=6, eos_token_ids=[], seed=11)
    b = await lm.batch_sample(prompts, max_tokens=6, eos_token_ids=[], seed=11)
    assert a == b and [len(s) for s in a] == [6, 6, 6]
    assert a[0] != a[1]  # equal prompts, seeds 11 and 12
    assert await lm.batch_sample([], max_tokens=3, eos_token_ids=[]) == []
    assert await lm.sample([1, 5], max_tokens=0, eos_token_ids=[]) == []
    lm.cleanup()


async def test_sample_stops_at_listed_eos_and_excludes_it(engines):
    lm = engines("tiny").lm()
    free = await lm.sample([1, 5, 6], max_tokens=8, eos_token_ids=[], seed=3)
    stop_at = free[2]
    cut = await lm.sample([1, 5, 6], max_tokens=8, eos_token_ids=[stop_at], seed=3)
    assert cut == free[: free.index(stop_at)]
    lm.cleanup()


# -- validation and failures ---------------------------------------------------------------


async def test_prompt_longer_than_max_model_len_is_refused(engines):
    lm = engines("tiny").lm()
    with pytest.raises(InvalidTokenIdsError, match="max_model_len is 512"):
        await lm.next_token_logprobs([5] * 512)
    assert (await lm.next_token_logprobs([5] * 511)).shape == (len(lm.byte_vocab),)
    lm.cleanup()


async def test_missing_row_fails_its_batch_and_the_next_batch_works(engines, monkeypatch):
    """A request the engine returns without a row raises for every caller of the batch."""
    lm = engines("tiny").lm(cache_size=0)
    capture = lm._runner.capture
    real_take = capture.take
    monkeypatch.setattr(capture, "take", lambda rid, width: None)
    results = await asyncio.gather(
        lm.next_token_logprobs([1, 2]), lm.next_token_logprobs([1, 3]), return_exceptions=True
    )
    assert all(isinstance(r, EngineOutputError) for r in results), results
    assert "without its log-probs" in str(results[0])
    monkeypatch.setattr(capture, "take", real_take)
    out = await lm.next_token_logprobs([1, 2])
    assert abs(torch.logsumexp(out.double(), 0).item()) < 1e-4
    assert not lm.llm.llm_engine.has_unfinished_requests()
    lm.cleanup()

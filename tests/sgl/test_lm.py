"""genlm-sgl on SGLang, in-process and via a server: conformance and agreement with genlm-hf.

The log-probs are computed by SGLang's real scheduler and model runner (on a CPU its
torch-native path). The reference is genlm-hf on the same fp32 weights (with torch's
linear kernels, see conftest.py): its plain transformers forward
(``next_token_logprobs_uncached``) and its cached, batched path. The bar is 1e-3;
observed here: ~7e-5.
"""

from __future__ import annotations

import asyncio
import random

import pytest
from session_requires import require

require("sglang", reason="SGLang is not installed (nox -s sgl installs it)")

import torch  # noqa: E402

from genlm_core.testing import AsyncLMConformance  # noqa: E402

ATOL = 1e-3


# -- conformance -----------------------------------------------------------------------


class TestInProcessConformance(AsyncLMConformance):
    # Rows of one prompt computed in different batch shapes differ by float rounding.
    atol = 1e-4

    @pytest.fixture
    def lm(self, make_lm):
        return make_lm()


class TestServerConformance(AsyncLMConformance):
    atol = 1e-4

    @pytest.fixture
    def lm(self, make_server_lm):
        return make_server_lm()


# -- agreement with the hf backend -------------------------------------------------------


def prompt_set(seed: int, vocab: int, n: int) -> list[list[int]]:
    """Prompts sharing prefixes, with duplicates and lengths 1..~150 (chunked above 64)."""
    rng = random.Random(seed)
    trunk = [rng.randrange(vocab) for _ in range(150)]
    prompts = []
    for i in range(n):
        r = i % 4
        if r == 0:  # a prefix of the trunk
            prompts.append(trunk[: rng.randrange(1, len(trunk) + 1)])
        elif r == 1:  # the trunk plus a branch
            prompts.append(trunk[: rng.randrange(1, 80)] + [rng.randrange(vocab)] * (i % 5 + 1))
        elif r == 2:  # unrelated
            prompts.append([rng.randrange(vocab) for _ in range(rng.randrange(1, 40))])
        else:  # a duplicate
            prompts.append(list(prompts[rng.randrange(len(prompts))]))
    return prompts


def max_errors(outs, prompts, hf) -> tuple[float, float]:
    """Max |ours - hf| over all rows: against hf's plain forward, and its batched path."""
    plain = max(
        (out - hf.next_token_logprobs_uncached(p)).abs().max().item()
        for out, p in zip(outs, prompts, strict=True)
    )
    hf.clear_cache()
    batched = (torch.stack(list(outs)) - hf.batch_next_token_logprobs_sync(prompts)).abs().max()
    return plain, batched.item()


@pytest.fixture(params=["in-process", "server"])
def sgl_lm(request):
    """A fresh model of each kind, without output cache (every row from SGLang)."""
    maker = request.getfixturevalue(
        "make_lm" if request.param == "in-process" else "make_server_lm"
    )
    return maker(cache_size=0)


async def test_concurrent_calls_beyond_max_running_requests_match_hf(sgl_lm, hf_reference):
    """24 concurrent callers, max_running_requests=4: every row, the right row."""
    prompts = prompt_set(0, len(sgl_lm.byte_vocab), 24)
    outs = await asyncio.gather(*(sgl_lm.next_token_logprobs(p) for p in prompts))
    plain, batched = max_errors(outs, prompts, hf_reference)
    print(f"max |sgl - hf|: plain forward {plain:.2e}, hf batched {batched:.2e}")
    assert plain < ATOL and batched < ATOL


def test_one_batch_of_many_distinct_prompts_matches_hf(sgl_lm, hf_reference):
    """One compute_batch of 40 distinct prompts (10x max_running_requests), rows in order."""
    prompts = list(dict.fromkeys(map(tuple, prompt_set(1, len(sgl_lm.byte_vocab), 60))))[:40]
    assert len(prompts) == 40
    outs = sgl_lm.batch_next_token_logprobs_sync(prompts)
    plain, batched = max_errors(list(outs), prompts, hf_reference)
    print(f"max |sgl - hf|: plain forward {plain:.2e}, hf batched {batched:.2e}")
    assert plain < ATOL and batched < ATOL


async def test_rows_stay_exact_after_radix_cache_hits(sgl_lm, hf_reference):
    """Long prompts sharing a trunk, asked twice: rows from cached prefixes stay exact."""
    rng = random.Random(5)
    trunk = [rng.randrange(len(sgl_lm.byte_vocab)) for _ in range(200)]
    prompts = [trunk[:n] for n in (65, 129, 150, 200)] + [trunk[:140] + [7, 8]]
    first = await sgl_lm.batch_next_token_logprobs(prompts)
    second = await sgl_lm.batch_next_token_logprobs(prompts)
    assert (first - second).abs().max().item() < 1e-4
    plain, batched = max_errors(list(second), prompts, hf_reference)
    assert plain < ATOL and batched < ATOL


def test_paris(make_lm):
    """The issue's reference value: ' Paris' after "The capital of France is"."""
    lm = make_lm()
    ids = lm.tokenizer.encode("The capital of France is")
    paris = lm.tokenizer.encode(" Paris")
    assert len(paris) == 1
    assert lm.next_token_logprobs_sync(ids)[paris[0]].item() == pytest.approx(-0.2581, abs=1e-3)


# -- sampling ----------------------------------------------------------------------------


async def test_near_greedy_sample_follows_argmax(sgl_lm):
    prompt = sgl_lm.tokenizer.encode("The capital of France is")
    sampled = await sgl_lm.sample(prompt, max_tokens=4, eos_token_ids=[], temperature=1e-6)
    greedy: list[int] = []
    for _ in range(4):
        greedy.append(int((await sgl_lm.next_token_logprobs(prompt + greedy)).argmax()))
    assert sampled == greedy

"""Live contexts: a call extending a context the engine holds computes only its new token.

Every row is checked against genlm-hf on the same weights (1e-3); the counters are the
runner's (tokens sent) and, on the engine started with vLLM's iteration details, vLLM's
own per-iteration scheduler counts (tokens computed).
"""

from __future__ import annotations

import asyncio
import random

import pytest
from session_requires import require

require("vllm", reason="vLLM is not installed (nox -s vllm installs it)")

import torch  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"
)

ATOL = 1e-3
#: conftest.ENGINE_OPTS without LoRA (that module is not importable by name here).
ENGINE_OPTS = {"dtype": "float32", "max_model_len": 512, "enforce_eager": True, "seed": 0}


def max_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


async def assert_rows_match(lm, hf, contexts, lora_name=None) -> None:
    ours = await asyncio.gather(*(lm.next_token_logprobs(c, lora_name=lora_name) for c in contexts))
    ref = await hf.batch_next_token_logprobs(contexts, lora_name=lora_name)
    for i, row in enumerate(ours):
        assert max_err(row, ref[i]) < ATOL, (i, contexts[i][-5:])


async def test_extension_sends_one_token_and_matches_hf(live, hf_reference):
    lm, hf = live, hf_reference("tiny")
    runner = lm._live
    ctx = [1, *range(10, 40)]
    sent, extended = runner.sent_tokens, runner.extended
    await assert_rows_match(lm, hf, [ctx])
    for t in (7, 300, 7, 31999):
        ctx = [*ctx, t]
        await assert_rows_match(lm, hf, [ctx])
    assert runner.extended - extended == 4
    assert runner.sent_tokens - sent == 31 + 4  # the context once, then one token a call


async def test_decode_beyond_max_num_seqs_matches_hf(live, hf_reference):
    """10 particles on an engine of 4 slots: waves of 4, least recent released, rows exact."""
    lm, hf = live, hf_reference("tiny")
    rng = random.Random(0)
    contexts = [[1, *rng.sample(range(3, 30000), 8)] for _ in range(10)]
    extended = lm._live.extended
    for _ in range(3):
        await assert_rows_match(lm, hf, contexts)
        contexts = [[*c, rng.randrange(3, 30000)] for c in contexts]
        assert len(lm._live.table) <= lm._live.table.slots
    assert lm._live.extended - extended >= 8  # the live four of each round were extended


async def test_duplicate_contexts_in_one_batch(live, hf_reference):
    lm, hf = live, hf_reference("tiny")
    c = [1, 50, 60, 70]
    await lm.next_token_logprobs(c)  # c is live
    batch = [c, c, [*c, 5], [*c, 5], [*c, 9]]
    ref = await hf.batch_next_token_logprobs(batch)
    rows = await lm.batch_next_token_logprobs(batch)
    assert max_err(rows, ref) < ATOL
    # the runner itself, without the batcher's deduplication
    prompts = [(p, None) for p in [*batch, [*c, 5, 6], [*c, 5, 6]]]
    rows = await asyncio.to_thread(lm._live.logprobs, prompts)
    ref = await hf.batch_next_token_logprobs([p for p, _ in prompts])
    assert max_err(torch.stack(rows), ref) < ATOL


async def test_cancelled_caller_whose_context_is_live(live, hf_reference):
    lm, hf = live, hf_reference("tiny")
    c = [1, 400, 401, 402]
    await lm.next_token_logprobs(c)
    task = asyncio.create_task(lm.next_token_logprobs([*c, 9]))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await assert_rows_match(lm, hf, [[*c, 9], [*c, 10]])
    await assert_rows_match(lm, hf, [[*c, 9, 11], [*c, 10, 12]])


async def test_sampling_and_per_call_runs_release_live_contexts(live, hf_reference):
    lm, hf = live, hf_reference("tiny")
    contexts = [[1, 20 + i, 30 + i] for i in range(4)]  # fills the engine's 4 slots
    await assert_rows_match(lm, hf, contexts)
    assert len(lm._live.table) == 4
    out = await lm.batch_sample(contexts, max_tokens=3, eos_token_ids=[], seed=1)
    assert [len(o) for o in out] == [3] * 4 and len(lm._live.table) == 0
    await assert_rows_match(lm, hf, [[*c, 5] for c in contexts])


async def test_per_call_path_matches_hf_and_releases_live_contexts(live, engines, hf_reference):
    """``live_contexts=False``: genlm-vllm's path before live contexts, kept selectable."""
    hf = hf_reference("tiny")
    contexts = [[1, *range(10, 25)], [1, *range(10, 25), 7], [1, 40, 41]]
    await assert_rows_match(live, hf, contexts[:1])
    assert len(live._live.table) == 1
    per_call = engines("tiny").lm(cache_size=0, live_contexts=False)
    try:
        assert per_call._live is None
        await assert_rows_match(per_call, hf, contexts)
        assert len(live._live.table) == 0  # the engine's slots were freed for the run
    finally:
        per_call.cleanup()
    await assert_rows_match(live, hf, contexts)  # the live path still serves the engine


# -- an engine whose KV cache holds fewer contexts than are live, with vLLM's counters ----


@pytest.fixture(scope="module")
def small_kv(model_paths):
    """A tiny-Llama engine of 8 slots and 16 KV blocks (128 tokens each), counting tokens."""
    import vllm

    from genlm_vllm._compat import shutdown_engine
    from genlm_vllm.lm import AsyncVirtualLM

    opts = {**ENGINE_OPTS, "max_num_seqs": 8}
    llm = vllm.LLM(
        model=model_paths("tiny"),
        max_logprobs=-1,
        enable_prefix_caching=True,
        num_gpu_blocks_override=16,  # of 128 tokens
        disable_log_stats=False,
        enable_logging_iteration_details=True,
        **opts,
    )
    yield AsyncVirtualLM(llm, owns_engine=False, cache_size=0)
    shutdown_engine(llm.llm_engine)


async def test_more_live_contexts_than_the_kv_cache_holds(small_kv, hf_reference):
    lm, hf = small_kv, hf_reference("tiny")
    runner = lm._live
    cache = lm.llm.llm_engine.vllm_config.cache_config
    assert cache.num_gpu_blocks * cache.block_size < 8 * 300  # 8 contexts do not fit
    rng = random.Random(1)
    contexts = [[1, *(rng.randrange(3, 30000) for _ in range(299))] for _ in range(8)]
    for _ in range(3):
        await assert_rows_match(lm, hf, contexts)
        assert runner.table.held_blocks() <= runner.table.blocks
        contexts = [[*c, rng.randrange(3, 30000)] for c in contexts]
    assert runner.extended > 0


async def test_vllm_counts_one_computed_token_per_extension(small_kv, hf_reference):
    lm, hf = small_kv, hf_reference("tiny")
    capture = lm._live.capture
    await lm.release_all()
    ctx = [1, *range(200, 220)]
    before = capture.computed_tokens
    await assert_rows_match(lm, hf, [ctx])
    assert capture.counting and capture.computed_tokens - before == 21
    for t in range(5):
        ctx = [*ctx, 100 + t]
        before = capture.computed_tokens
        await assert_rows_match(lm, hf, [ctx])
        assert capture.computed_tokens - before == 1

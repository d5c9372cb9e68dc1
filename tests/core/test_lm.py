"""AsyncLMBase / BatchedAsyncLM behaviour beyond the conformance suite."""

import asyncio
import gc
import os
import subprocess
import sys
import threading
import weakref

import numpy as np
import pytest
import torch

from genlm_core import BatchedAsyncLM
from genlm_core.errors import (
    BackendContractError,
    BatchSizeMismatchError,
    InvalidTokenIdsError,
    ModelClosedError,
    UnknownLoraError,
)
from genlm_core.testing import ByteTokenizer, MockAsyncLM

GUARD_SECONDS = 30.0  # only turns a hang into a failure


@pytest.fixture(scope="module")
def tokenizer():
    return ByteTokenizer()


@pytest.fixture
def lm(tokenizer):
    model = MockAsyncLM(tokenizer)
    yield model
    model.cleanup()


async def test_identical_concurrent_requests_are_computed_once(lm):
    outs = await asyncio.gather(*(lm.next_token_logprobs([1, 2, 3]) for _ in range(10)))
    assert lm.batches == [1]
    assert all(torch.equal(o, outs[0]) for o in outs)  # one computation...
    assert len({o.data_ptr() for o in outs}) == 10  # ...and each caller its own row


async def test_concurrent_requests_share_one_batch(lm):
    await asyncio.gather(*(lm.next_token_logprobs([i + 1]) for i in range(20)))
    assert lm.batches == [20]


async def test_batch_size_bounds_each_forward(tokenizer):
    lm = MockAsyncLM(tokenizer, batch_size=8)
    await asyncio.gather(*(lm.next_token_logprobs([i + 1]) for i in range(20)))
    assert sum(lm.batches) == 20 and max(lm.batches) <= 8


async def test_cache_serves_repeats_without_compute(lm):
    a = await lm.next_token_logprobs([5, 6])
    b = await lm.next_token_logprobs([5, 6])
    assert torch.equal(a, b) and lm.batches == [1]
    assert a.data_ptr() != b.data_ptr()  # the hit is a copy: masking it changes nothing else
    lm.clear_cache()
    await lm.next_token_logprobs([5, 6])
    assert lm.batches == [1, 1]


def test_sync_batch_dedupes_and_caches(lm):
    out = lm.batch_next_token_logprobs_sync([[1], [2], [1], [1]])
    assert out.shape == (4, 257) and lm.batches == [2]
    assert torch.equal(out[0], out[2])
    lm.batch_next_token_logprobs_sync([[1], [2]])
    assert lm.batches == [2]


async def test_empty_batch(lm):
    assert (await lm.batch_next_token_logprobs([])).shape == (0, 257)
    assert lm.batch_next_token_logprobs_sync([]).shape == (0, 257)


async def test_lora_is_per_request(lm, tmp_path):
    with pytest.raises(UnknownLoraError, match="'style'"):
        await lm.next_token_logprobs([1], lora_name="style")
    (tmp_path / "style").write_bytes(b"style adapter")
    lm.add_new_lora(tmp_path / "style", "style")
    base, styled = await asyncio.gather(
        lm.next_token_logprobs([1]), lm.next_token_logprobs([1], lora_name="style")
    )
    assert not torch.allclose(base, styled)
    assert lm.lora_names == ["style"]
    lm.remove_lora("style")
    with pytest.raises(UnknownLoraError):
        lm.next_token_logprobs_sync([1], lora_name="style")
    with pytest.raises(UnknownLoraError):
        lm.remove_lora("style")


async def test_numpy_and_tensor_ids_are_accepted(lm):
    import numpy as np

    a = await lm.next_token_logprobs(np.array([3, 4]))
    b = await lm.next_token_logprobs(torch.tensor([3, 4]))
    assert torch.equal(a, b)


@pytest.mark.parametrize("bad", [[True], [None], [257], [0, -5], 7])
def test_invalid_ids_raise_with_value(lm, bad):
    with pytest.raises(InvalidTokenIdsError) as info:
        lm.next_token_logprobs_sync(bad)
    shown = str(bad[-1]) if isinstance(bad, list) else "int"
    assert shown in str(info.value)


async def test_sampling_argument_errors(lm):
    with pytest.raises(ValueError, match="max_tokens"):
        await lm.sample([1], max_tokens=-1, eos_token_ids=[])
    with pytest.raises(ValueError, match="temperature"):
        await lm.sample([1], max_tokens=2, eos_token_ids=[], temperature=0)
    with pytest.raises(ValueError, match=r"\[256\]"):
        await lm.sample([1], max_tokens=2, eos_token_ids=256)


async def test_batch_sample_seeds_differ_per_prompt(lm):
    a, b = await lm.batch_sample([[1], [1]], max_tokens=8, eos_token_ids=[], seed=3)
    again = await lm.batch_sample([[1], [1]], max_tokens=8, eos_token_ids=[], seed=3)
    assert [a, b] == again and a != b


async def test_use_after_cleanup(lm):
    lm.cleanup()
    for call in (
        lambda: lm.next_token_logprobs([1]),
        lambda: lm.batch_next_token_logprobs([[1]]),
        lambda: lm.sample([1], 2, []),
    ):
        with pytest.raises(ModelClosedError, match="was closed"):
            await call()


async def test_close_is_cleanup_under_one_lifecycle(tokenizer):
    """close() is the lifecycle's end; cleanup() (genlm-backend's name) is the same call."""
    calls = []

    class Counted(MockAsyncLM):
        def cleanup(self):  # a subclass written against genlm-backend's name still runs
            calls.append("cleanup")
            super().cleanup()

    lm = Counted(tokenizer)
    await lm.next_token_logprobs([1])
    lm.close()
    assert lm.closed and calls == ["cleanup"]
    with pytest.raises(ModelClosedError, match="was closed"):
        await lm.next_token_logprobs([2])
    lm.close()  # idempotent
    lm.cleanup()
    assert lm.closed
    with Counted(tokenizer) as other:
        other.next_token_logprobs_sync([1])
    assert other.closed and calls[-1] == "cleanup"


async def test_async_context_manager(tokenizer):
    async with MockAsyncLM(tokenizer) as lm:
        await lm.next_token_logprobs([1])
    assert lm.closed


def test_vocab_size_pads_logits_width(tokenizer):
    lm = MockAsyncLM(tokenizer, vocab_size=300)
    assert (
        len(lm.byte_vocab) == 300
        and lm.byte_vocab[299] == b""
        and lm.byte_vocab[299].token_id == 299
    )
    assert lm.next_token_logprobs_sync([299]).shape == (300,)


class Flaky(BatchedAsyncLM):
    """Fails every batch that contains token 13; returns wrong shapes on request."""

    def __init__(self, tokenizer, mode="ok"):
        super().__init__(tokenizer, cache_size=0)
        self.mode = mode

    def compute_batch(self, requests):
        if any(13 in r.token_ids for r in requests):
            raise RuntimeError("unlucky batch")
        n = len(self.byte_vocab)
        if self.mode == "short":
            requests = requests[:-1]
        shape = (n,) if self.mode != "wide" else (n + 1,)
        return [torch.full(shape, -torch.log(torch.tensor(float(n)))) for _ in requests]


async def test_error_reaches_every_caller_and_next_batch_works(tokenizer):
    lm = Flaky(tokenizer)
    results = await asyncio.gather(
        lm.next_token_logprobs([1]),
        lm.next_token_logprobs([13]),
        lm.next_token_logprobs([2]),
        return_exceptions=True,
    )
    assert all(isinstance(r, RuntimeError) and "unlucky" in str(r) for r in results)
    ok = await asyncio.gather(lm.next_token_logprobs([1]), lm.next_token_logprobs([2]))
    assert all(o.shape == (257,) for o in ok)


async def test_wrong_result_count_is_batch_size_mismatch(tokenizer):
    lm = Flaky(tokenizer, mode="short")
    results = await asyncio.gather(
        lm.next_token_logprobs([1]), lm.next_token_logprobs([2]), return_exceptions=True
    )
    assert all(isinstance(r, BatchSizeMismatchError) for r in results)
    with pytest.raises(BatchSizeMismatchError, match="1 results for 2"):
        lm.batch_next_token_logprobs_sync([[1], [2]])


async def test_wrong_result_shape_is_contract_error(tokenizer):
    lm = Flaky(tokenizer, mode="wide")
    with pytest.raises(BackendContractError, match=r"\(257,\)"):
        await lm.next_token_logprobs([1])


async def test_model_works_across_event_loops(tokenizer):
    lm = MockAsyncLM(tokenizer)
    a = await lm.next_token_logprobs([9])

    def in_other_loop():
        lm.clear_cache()
        return asyncio.run(lm.next_token_logprobs([9]))

    b = await asyncio.get_running_loop().run_in_executor(None, in_other_loop)
    assert torch.equal(a, b)
    lm.cleanup()


class ThreadAware(Flaky):
    """Records which threads ``init_worker_thread`` and ``compute_batch`` ran on."""

    def __init__(self, tokenizer):
        super().__init__(tokenizer)
        self.inits = []
        self.computes = []

    def init_worker_thread(self):
        self.inits.append(threading.current_thread())

    def compute_batch(self, requests):
        self.computes.append(threading.current_thread())
        return super().compute_batch(requests)


async def test_init_worker_thread_runs_in_the_batcher_thread_only(tokenizer):
    lm = ThreadAware(tokenizer)
    lm.next_token_logprobs_sync([5])  # the caller's thread: never initialised
    assert lm.inits == []
    await asyncio.gather(lm.next_token_logprobs([1]), lm.next_token_logprobs([2]))
    await lm.next_token_logprobs([3])
    assert len(lm.inits) == 1
    assert lm.inits[0] is lm.computes[-1] is lm.computes[-2]
    assert lm.inits[0] is not threading.current_thread()
    lm.cleanup()


def test_one_worker_thread_serves_successive_event_loops(tokenizer):
    lm = ThreadAware(tokenizer)
    for ids in ([1], [2], [3]):  # a sampler run per asyncio.run, as in genlm-backend's README
        asyncio.run(lm.next_token_logprobs(ids))
    assert len(lm.inits) == 1 and set(lm.computes) == {lm.inits[0]}
    worker = lm.inits[0]
    lm.cleanup()
    worker.join(GUARD_SECONDS)
    assert not worker.is_alive()


def test_a_dropped_model_is_freed_with_its_worker_thread(tokenizer):
    """The worker thread keeps nothing alive and stops with the model: no cleanup() needed."""
    lm = ThreadAware(tokenizer)
    asyncio.run(lm.next_token_logprobs([1]))
    worker = lm.inits[0]
    ref = weakref.ref(lm)
    del lm
    gc.collect()
    assert ref() is None
    worker.join(GUARD_SECONDS)  # the freed batcher stops its thread
    assert not worker.is_alive()


def test_timeout_is_genlm_backends_name_for_max_wait(tokenizer):
    assert MockAsyncLM(tokenizer, timeout=0.25).max_wait == 0.25
    assert MockAsyncLM(tokenizer, max_wait=0.1).max_wait == 0.1


def test_prompts_longer_than_max_positions_are_rejected(tokenizer):
    lm = MockAsyncLM(tokenizer)
    lm.max_positions = 3
    assert lm.validate_token_ids([1, 2, 3]) == (1, 2, 3)
    with pytest.raises(InvalidTokenIdsError, match="4 tokens, more than the model's context of 3"):
        lm.validate_token_ids([1, 2, 3, 4])


async def test_rows_of_dropped_outputs_are_recycled(tokenizer):
    lm = MockAsyncLM(tokenizer, batch_size=4)
    first = [(await lm.batch_next_token_logprobs([[i + 1] for i in range(4)])).clone()]
    lm.clear_cache()
    await asyncio.sleep(0)  # the loop lets go of the handle that resumed us (it holds a row)
    gc.collect()
    assert lm.output_cache_info()["free_row_bytes"] == 4 * lm.row_pool.row_bytes
    again = await lm.batch_next_token_logprobs([[i + 1] for i in range(4)])
    assert lm.row_pool.stats().reused == 4
    assert torch.equal(again, first[0])  # recomputed into recycled memory: same values
    lm.cleanup()
    assert lm.row_pool.stats().free_rows == 0


async def test_cached_and_free_rows_stay_within_the_cache_budget_and_one_batch(tokenizer, young_gc):
    probe = MockAsyncLM(tokenizer)
    row_bytes = probe.row_pool.row_bytes
    probe.cleanup()
    lm = MockAsyncLM(tokenizer, batch_size=2, cache_bytes=10 * row_bytes)
    for start in range(0, 40, 2):  # 40 rows through a 10-row cache
        await lm.batch_next_token_logprobs([[start + 1], [start + 2]])
        gc.collect()
        info = lm.output_cache_info()
        # within the budget, plus at most one batch kept free for the next batch
        assert info["bytes"] + info["free_row_bytes"] <= 10 * row_bytes + 2 * row_bytes
    assert lm.row_pool.stats().reused > 0  # evicted rows came back and were reused
    lm.clear_cache()
    await asyncio.sleep(0)
    gc.collect()
    assert lm.output_cache_info()["free_row_bytes"] == 10 * row_bytes
    lm.cleanup()


async def test_batch_info_counts_batches_and_their_mean_size(tokenizer):
    lm = MockAsyncLM(tokenizer, batch_size=4)
    await asyncio.gather(*(lm.next_token_logprobs([i + 1]) for i in range(10)))
    info = lm.batch_info()
    assert info["batches"] == len(lm.batches) and info["requests"] == 10 == sum(lm.batches)
    assert info["mean_batch_size"] == 10 / len(lm.batches)
    await lm.next_token_logprobs([1])  # a cache hit is not computed
    lm.batch_next_token_logprobs_sync([[50], [51], [50]])  # the sync path counts too
    assert lm.batch_info()["requests"] == 12 and lm.batch_info()["batches"] == len(lm.batches)
    lm.reset_batch_info()
    assert lm.batch_info() == {"batches": 0, "requests": 0, "mean_batch_size": 0.0}
    lm.cleanup()


@pytest.mark.parametrize("bad", [[0, 300], [], "text"])
async def test_bad_prompt_of_a_batch_is_named_by_its_position(lm, bad):
    batch = [[1, 2], [3], bad, [4]]
    with pytest.raises(InvalidTokenIdsError, match=r"^token_ids_list\[2\]: token_ids"):
        await lm.batch_next_token_logprobs(batch)
    with pytest.raises(InvalidTokenIdsError, match=r"^token_ids_list\[2\]: token_ids"):
        lm.batch_next_token_logprobs_sync(batch)
    assert lm.batches == []  # refused before anything was computed


def test_a_batch_must_be_a_list_of_prompts(lm):
    with pytest.raises(InvalidTokenIdsError, match="token_ids_list must be a list of prompts"):
        lm.batch_next_token_logprobs_sync("hello")


def test_mock_keeps_the_sizes_of_its_last_batches_only(tokenizer):
    lm = MockAsyncLM(tokenizer, cache_size=0)
    lm.recorded_batches = 4
    for n in range(1, 11):
        lm.batch_next_token_logprobs_sync([[1, k] for k in range(n)])
    assert lm.batches == [7, 8, 9, 10]  # a list, bounded: the oldest sizes are dropped
    lm.cleanup()


def test_output_cache_budget_counts_long_contexts(tokenizer):
    """Long prompts over a small vocabulary: the cache's keys count against cache_bytes."""
    budget = 1 << 20
    lm = MockAsyncLM(tokenizer, cache_bytes=budget)
    for i in range(40):
        lm.next_token_logprobs_sync([1 + i] * 20_000)
    info = lm.output_cache_info()
    held = info["entries"] * (8 * 20_000 + 4 * len(lm.byte_vocab))  # ids and rows
    assert held <= budget, f"{info['entries']} cached prompts hold {held} bytes > {budget}"
    assert held <= info["bytes"] <= budget
    lm.cleanup()


def test_mock_rows_are_the_same_in_every_process(tokenizer):
    """The mock seeds from the prompt's hash: ints and their tuples are never salted."""
    code = (
        "from genlm_core.testing import ByteTokenizer, MockAsyncLM\n"
        "lm = MockAsyncLM(ByteTokenizer())\n"
        "print(lm.next_token_logprobs_sync([1, 2, 3] * 100)[:4].tolist())\n"
        "lm.cleanup()\n"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("0", "12345", "random")
    }
    lm = MockAsyncLM(tokenizer)
    here = str(lm.next_token_logprobs_sync([1, 2, 3] * 100)[:4].tolist())
    lm.cleanup()
    assert outs == {here + "\n"}


def test_mock_rows_are_normalised_permutations_of_a_few_base_rows(tokenizer):
    """A row costs a copy (issue 39): each is a base row, permuted by the request's seed."""
    lm = MockAsyncLM(tokenizer)
    bases = [np.sort(base) for base in lm.base_rows()]
    rows = lm.batch_next_token_logprobs_sync([[i + 1, 7] for i in range(50)])
    for row in rows:
        assert abs(torch.logsumexp(row.double(), 0).item()) < 1e-5
        values = np.sort(row.numpy())
        assert any(np.array_equal(values, base) for base in bases)
    lm.cleanup()


def test_mock_rows_differ_between_prompts_and_not_between_batches(tokenizer):
    """Many distinct prompts over a tiny vocabulary: no two rows alike; batch shape is moot."""
    lm = MockAsyncLM(tokenizer, cache_size=0)
    prompts = [[a, b] for a in range(1, 60) for b in range(1, 60)]  # 3481 prompts
    rows = lm.batch_next_token_logprobs_sync(prompts)
    assert len({row.numpy().tobytes() for row in rows}) == len(prompts)
    alone = torch.stack([lm.next_token_logprobs_sync(p) for p in prompts[::97]])
    assert torch.equal(alone, rows[::97])
    lm.cleanup()


def test_mock_temperature_scales_the_base_logits(tokenizer):
    """Lower temperature, peakier rows; changing it later draws new base rows."""
    hot, cold = MockAsyncLM(tokenizer, temperature=2.0), MockAsyncLM(tokenizer, temperature=0.2)

    def entropy(lm):
        row = lm.next_token_logprobs_sync([1, 2])
        return -(row.exp() * row).sum().item()

    assert entropy(cold) < entropy(hot)
    row = hot.next_token_logprobs_sync([1, 2])
    hot.temperature = 0.2
    hot.clear_cache()
    assert torch.equal(hot.next_token_logprobs_sync([1, 2]), cold.next_token_logprobs_sync([1, 2]))
    assert not torch.equal(row, cold.next_token_logprobs_sync([1, 2]))
    hot.cleanup()
    cold.cleanup()

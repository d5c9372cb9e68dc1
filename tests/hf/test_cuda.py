"""genlm-hf on an NVIDIA GPU, and the architectures its prefix cache must be exact on.

Tests marked ``cuda`` skip with the reason on a machine without an NVIDIA GPU; they
ran on a lent H100 (``docs/gpu.md`` has the command, ``docs/reports/gpu.md`` the
figures). The architecture tests without the mark run everywhere, in float32 on the CPU.

Tolerances:

* float32, CUDA against the CPU: 1e-4 (the issue's bar). CUDA float32 matrix products
  are exact float32 here (torch leaves TF32 off for them by default); what differs is
  the order of accumulation, a few float32 ulps of a log-prob.
* bfloat16, the prefix-cached path against a plain forward: two bfloat16 ulps of the
  largest logit (``2 * 2**-7 * max(1, spread)``, the spread being the row's largest
  log-prob minus its mean: logits are only defined up to a shift). A bfloat16 logit
  carries 8 significant bits; each path rounds every logit once (<= 1 ulp apart) and
  accumulates in another order (batch and past shapes pick other kernels): within one
  more ulp.
"""

from __future__ import annotations

import asyncio
import copy
import os
import random
import warnings
from typing import Any

import pytest
import torch
from tiny_architectures import ARCHITECTURES, arch_model, bf16_tolerance

from genlm_core.errors import BackendContractError
from genlm_core.testing import AsyncLMConformance
from genlm_hf.lm import AsyncTransformer

cuda = pytest.mark.cuda  # skipped, with the reason, without an NVIDIA GPU
#: The GPU the cuda-marked tests use ("cpu" only to dry-run their logic without one).
GPU = os.environ.get("GENLM_TEST_GPU", "cuda")


def sampler_prompts(vocab: int, seed: int = 0) -> list[list[int]]:
    """Prompts a sampler makes: a shared prefix, branches, extensions by one token, repeats."""
    rng = random.Random(seed)
    base = [rng.randrange(vocab) for _ in range(30)]
    branches = [base[:12] + [rng.randrange(vocab) for _ in range(k)] for k in (1, 5, 15)]
    prompts = [base[:n] for n in (1, 3, 9, 12, 20, 30)] + branches
    return prompts + [p + [rng.randrange(vocab)] for p in prompts] + [base[:20]]


async def cached_and_plain(lm: AsyncTransformer, prompts: list[list[int]]) -> list[tuple]:
    """(cached row, plain-forward row) per prompt; prompts asked in two concurrent waves."""
    half = len(prompts) // 2
    rows = await asyncio.gather(*(lm.next_token_logprobs(p) for p in prompts[:half]))
    rows += await asyncio.gather(*(lm.next_token_logprobs(p) for p in prompts[half:]))
    return [(row, lm.next_token_logprobs_uncached(p)) for row, p in zip(rows, prompts, strict=True)]


# -- architectures: the prefix cache equals plain forwards ----------------------------------


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
async def test_architectures_cached_equal_plain_float32_cpu(arch, gpt2_tokenizer):
    model = arch_model(arch, len(gpt2_tokenizer), torch.float32, "cpu")
    lm = AsyncTransformer(model, gpt2_tokenizer)
    assert lm.kv_reuse, lm.kv_reuse_off_reason
    for row, plain in await cached_and_plain(lm, sampler_prompts(len(lm.byte_vocab))):
        torch.testing.assert_close(row, plain, atol=1e-4, rtol=0)
    assert lm.kv_cache_stats.hits > 0
    lm.cleanup()


@cuda
@pytest.mark.parametrize("row_device", ["auto", "cpu"])
@pytest.mark.parametrize("arch", list(ARCHITECTURES))
async def test_architectures_cached_equal_plain_bfloat16_cuda(arch, row_device, gpt2_tokenizer):
    model = arch_model(arch, len(gpt2_tokenizer), torch.bfloat16, GPU)
    lm = AsyncTransformer(model, gpt2_tokenizer, row_device=row_device)
    assert lm.kv_reuse, lm.kv_reuse_off_reason
    worst = 0.0
    for row, plain in await cached_and_plain(lm, sampler_prompts(len(lm.byte_vocab))):
        assert row.device == plain.device == lm.row_device
        deviation = (row - plain).abs().max().item()
        assert deviation <= bf16_tolerance(plain), (deviation, bf16_tolerance(plain))
        worst = max(worst, deviation)
    assert lm.kv_cache_stats.hits > 0
    print(f"{arch} bf16 cuda: worst |cached - plain| = {worst:.3g}")
    lm.cleanup()


def test_row_device_option_is_checked(hf_models):
    loaded = hf_models("tiny-gpt2")
    for option in ("auto", "model", "cpu"):
        lm = loaded.lm(row_device=option)
        assert lm.row_device == torch.device("cpu")  # a CPU model's rows are on the CPU
        lm.cleanup()
    with pytest.raises(ValueError, match=r"row_device must be one of 'auto', 'cpu', 'model'.*gpu"):
        loaded.lm(row_device="gpu")


# -- CUDA float32 equals the CPU ----------------------------------------------------------------


def on_cuda(loaded: Any, dtype: torch.dtype, **opts: Any) -> AsyncTransformer:
    """An AsyncTransformer over a copy of a session model moved to the GPU in ``dtype``."""
    model = copy.deepcopy(loaded.model).to(device=GPU, dtype=dtype)
    return AsyncTransformer(model, loaded.tokenizer, byte_vocab=loaded.byte_vocab, **opts)


@cuda
@pytest.mark.parametrize("row_device", ["auto", "cpu"])
@pytest.mark.parametrize("key", ["tiny-gpt2", "tiny-llama3"])
async def test_cuda_float32_equals_cpu(hf_models, key, row_device):
    loaded = hf_models(key)
    cpu = loaded.lm()
    gpu = on_cuda(loaded, torch.float32, row_device=row_device)
    assert gpu.row_device.type == (GPU if row_device == "auto" else "cpu")
    prompts = sampler_prompts(len(cpu.byte_vocab), seed=1)
    ours = await asyncio.gather(*(gpu.next_token_logprobs(p) for p in prompts))
    theirs = await asyncio.gather(*(cpu.next_token_logprobs(p) for p in prompts))
    for a, b in zip(ours, theirs, strict=True):
        assert a.device == gpu.row_device
        torch.testing.assert_close(a.cpu(), b, atol=1e-4, rtol=0)
    rows = await gpu.prefix_next_token_logprobs(prompts[-1])
    torch.testing.assert_close(
        rows.cpu(), cpu.prefix_next_token_logprobs_sync(prompts[-1]), atol=1e-4, rtol=0
    )
    gpu.cleanup()
    cpu.cleanup()


# -- the conformance suite on the GPU -------------------------------------------------------------


class CudaConformance(AsyncLMConformance):
    """The conformance suite over a session model moved to the GPU (set the three below)."""

    key: str
    dtype: torch.dtype
    row_device: str = "auto"

    @pytest.fixture
    def lm(self, hf_models):
        model = on_cuda(hf_models(self.key), self.dtype, row_device=self.row_device)
        if self.row_device == "auto":
            assert model.row_device.type == GPU
        yield model
        model.cleanup()


@cuda
class TestTinyGPT2CudaFloat32Conformance(CudaConformance):
    """Rows on the GPU (the default there)."""

    key, dtype = "tiny-gpt2", torch.float32


@cuda
class TestTinyLlama3CudaFloat32CpuRowsConformance(CudaConformance):
    """Rows moved to the CPU (``row_device="cpu"``)."""

    key, dtype, row_device = "tiny-llama3", torch.float32, "cpu"


@cuda
class TestTinyLlama3CudaBfloat16Conformance(CudaConformance):
    # Batched against single rows in bfloat16: other batch shapes pick other kernels.
    # The tiny models' logits are below 1 in magnitude: two bfloat16 ulps there.
    atol = 2 * 2**-7
    prefix_atol = 2 * 2**-7
    key, dtype = "tiny-llama3", torch.bfloat16


@cuda
class TestTinyGPT2CudaBfloat16CpuRowsConformance(CudaConformance):
    atol = 2 * 2**-7
    prefix_atol = 2 * 2**-7
    key, dtype, row_device = "tiny-gpt2", torch.bfloat16, "cpu"


# -- rows on the device: batched checks and copies, the cache's budget ----------------------------


def count_syncs(fn: Any) -> int:
    """Host synchronisations ``fn()`` makes, as ``torch.cuda.set_sync_debug_mode`` reports them."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchronizing" in str(w.message) for w in seen)


@cuda
def test_device_rows_are_checked_and_copied_with_one_sync_per_batch(hf_models):
    """The core's row handling makes a constant number of host read-backs, not one per row."""
    lm = on_cuda(hf_models("tiny-gpt2"), torch.float32)
    from genlm_core.lm import Request

    warm = torch.log_softmax(torch.randn(2, len(lm.byte_vocab), device=GPU), dim=-1)
    lm._computation.checked_rows(
        [Request((1,), None)] * 2, list(warm), "compute_batch"
    )  # lazy inits
    syncs = {}
    for n in (1, 8, 64):
        batch = torch.log_softmax(torch.randn(n, len(lm.byte_vocab), device=GPU), dim=-1)
        reqs = [Request((i + 1,), None) for i in range(n)]
        rows = list(batch.unbind(0))
        syncs[n] = count_syncs(
            lambda r=reqs, o=rows: lm._computation.checked_rows(r, o, "compute_batch")
        )
    # On an H100: {1: 2, 8: 1, 64: 1} (a single row is read back through another path).
    assert syncs[8] == syncs[64] == 1 and syncs[1] <= 2, syncs
    lm.cleanup()


@cuda
def test_syncs_per_batch_do_not_grow_with_its_rows(hf_models):
    """A whole batch (forward, checks, cache, callers' copies): syncs independent of its size."""
    lm = on_cuda(hf_models("tiny-llama3"), torch.float32)
    lm.next_token_logprobs_sync([1, 2, 3])  # warm-up: lazy initialisation syncs once
    counts = {}
    for n in (2, 32):
        prompts = [[7, 8, 9 + i] for i in range(n)]
        lm.clear_cache()
        counts[n] = count_syncs(lambda p=prompts: lm.batch_next_token_logprobs_sync(p))
    assert counts[2] == counts[32], counts
    lm.cleanup()


@cuda
async def test_device_rows_keep_the_output_cache_in_budget(hf_models):
    loaded = hf_models("tiny-gpt2")
    row_bytes = len(loaded.byte_vocab[0]) * 4  # byte_vocab: (byte_vocab, str_vocab)
    budget = 3 * (row_bytes + 512)  # three rows and their keys (a short prompt's: ~120 B)
    lm = on_cuda(loaded, torch.float32, cache_bytes=budget)
    await lm.batch_next_token_logprobs([[i + 1] for i in range(10)])
    info = lm.cache_info()["outputs"]
    assert info["entries"] == 3 and info["bytes"] <= budget
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    for start in range(0, 400, 40):  # many more rows than the budget holds
        rows = await lm.batch_next_token_logprobs([[start + i + 1, 5] for i in range(40)])
        del rows
    torch.cuda.synchronize()
    grown = torch.cuda.memory_allocated() - before
    # cached rows stay within 3 rows; the K/V pool grows by the new tokens' keys/values
    kv = lm.kv_cache_stats.pool_bytes
    assert grown <= 3 * row_bytes + kv + (4 << 20), (grown, kv)
    lm.cleanup()


@cuda
async def test_a_bad_device_row_fails_only_its_request(hf_models):
    lm = on_cuda(hf_models("tiny-gpt2"), torch.float32)
    original = lm._log_softmax

    def poisoned(logits):
        rows = original(logits)
        rows[0] = rows[0].clone().fill_(float("nan"))
        return rows

    lm._log_softmax = poisoned
    a, b = await asyncio.gather(
        lm.next_token_logprobs([3, 4]), lm.next_token_logprobs([5, 6]), return_exceptions=True
    )
    failed = [r for r in (a, b) if isinstance(r, BaseException)]
    assert len(failed) == 1 and isinstance(failed[0], BackendContractError)
    assert "NaN" in str(failed[0]) and GPU in str(failed[0]).lower()
    lm.cleanup()


@cuda
async def test_seeded_sampling_from_device_rows(hf_models):
    """A seed's generator is a CPU one: device rows are drawn from on the CPU, reproducibly."""
    lm = on_cuda(hf_models("tiny-gpt2"), torch.float32)
    eos = [lm.tokenizer.eos_token_id]
    a = await lm.sample([1, 2], 8, eos, seed=3)
    b = await lm.sample([1, 2], 8, eos, seed=3)
    assert a == b and all(0 <= t < len(lm.byte_vocab) for t in a)
    unseeded = await lm.sample([1, 2], 4, eos)  # the default generator of the rows' device
    assert len(unseeded) <= 4
    lm.cleanup()


# -- the byte-level LM on the GPU ----------------------------------------------------------------


@cuda
@pytest.mark.parametrize("row_device", ["auto", "cpu"])
async def test_byte_level_lm_on_cuda_agrees_with_cpu(hf_models, row_device):
    import numpy as np

    from genlm_bytelm import BeamParams, ByteBeamState, ExactByteState

    loaded = hf_models("tiny-gpt2")
    cpu = loaded.lm()
    gpu = on_cuda(loaded, torch.float32, row_device=row_device)
    text = b"The capital of Fra"
    for make in (
        lambda lm: ByteBeamState.initial(lm, BeamParams(K=4)),
        lambda lm: ExactByteState.initial(lm),
    ):
        states = [await (await make(lm)).prefill(text) for lm in (cpu, gpu)]
        (a, b) = [(await s.logp_next()).ps for s in states]
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=0)  # equal -inf where no token fits
        assert states[0].logZ == pytest.approx(states[1].logZ, abs=1e-4)
        # and after more bytes: the states' next steps run on the GPU too
        later = [await s.prefill(b"nce is") for s in states]
        (a, b) = [(await s.logp_next()).ps for s in later]
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=0)
    gpu.cleanup()
    cpu.cleanup()

"""ExactByteState over genlm-hf: forwards, numerics against float64, SmolLM2 figures.

* Prefilling a text asks the model in one prefix forward (the contexts it needs are
  listed without the model); greedy generation with speculation asks for the
  contexts of predicted bytes in forwards it needs anyway: under one forward a byte.
* Over genlm-hf's float32 log-probabilities it agrees with the float64 reference LM
  to float32 precision.
* On SmolLM2 (slow): close to the unpruned beam (the model's mass on non-canonical
  tokenizations is small), and ``log_likelihood`` is prefill's ``logZ``.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from torch_lm import Float64TorchLM

from genlm_bytelm import BeamParams, ByteBeamState, ExactByteState, log_likelihood

TEXT = b"The history of the city dates back to the Roman period, when a small settlement grew."


@contextlib.contextmanager
def count_forwards(lm):
    """The shapes of the model's forwards inside the block (the model is shared: restored)."""
    calls = []
    original = lm.model.forward

    def counting(*args, **kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        calls.append(tuple(ids.shape))
        return original(*args, **kwargs)

    lm.model.forward = counting
    try:
        yield calls
    finally:
        lm.model.forward = original


@pytest.fixture
def tiny(hf_models):
    model = hf_models("tiny-gpt2").lm()
    yield model
    model.cleanup()


async def test_prefill_is_one_prefix_forward(tiny):
    state = await ExactByteState.initial(tiny)
    with count_forwards(tiny) as calls:
        prefilled = await state.prefill(TEXT)
    assert len(prefilled) >= 1
    assert len(calls) <= 2 and calls[0][0] == 1  # the prefix forward, maybe a few detours


async def test_float32_model_agrees_with_the_float64_reference(hf_models):
    loaded = hf_models("tiny-gpt2")
    hf = loaded.lm()
    exact = Float64TorchLM(type(loaded.model).from_pretrained(loaded.path), loaded.tokenizer)
    for data in [b"The cat sat", "naïve 中文".encode(), b"x = [1, 2]\n"]:
        a = await (await ExactByteState.initial(hf)).prefill(data)
        b = await (await ExactByteState.initial(exact)).prefill(data)
        assert a.logZ == pytest.approx(b.logZ, abs=1e-4)
        pa, pb = (await a.logp_next()).ps, (await b.logp_next()).ps
        likely = np.exp(pb) > 1e-6
        assert np.abs(pa[likely] - pb[likely]).max() < 1e-3
    hf.cleanup()


async def test_log_likelihood_is_the_prefill_logz(tiny):
    result = await log_likelihood(tiny, TEXT)
    state = await (await ExactByteState.initial(tiny)).prefill(TEXT)
    assert result.logprob == pytest.approx(state.logZ, abs=1e-9)
    assert result.bits_per_byte == pytest.approx(-state.logZ / (len(TEXT) * np.log(2)))
    eos = [bytes(tiny.byte_vocab[tiny.tokenizer.eos_token_id])]
    ended = await log_likelihood(tiny, TEXT, eos_byte_strings=eos, ends=True)
    assert ended.logprob < result.logprob


@pytest.mark.slow
async def test_greedy_is_under_one_forward_per_byte(smollm2):
    eos = [bytes(smollm2.byte_vocab[smollm2.tokenizer.eos_token_id])]
    outs = []
    for speculate in (True, False):
        smollm2.clear_cache()
        start = await ExactByteState.initial(smollm2, eos_byte_strings=eos, speculate=speculate)
        state = await start.prefill(TEXT)
        with count_forwards(smollm2) as calls:
            outs.append(await state.greedy(b"", 32))
        if speculate:
            assert len(calls) / len(outs[-1]) < 0.6
    assert outs[0] == outs[1]  # speculation only warms caches


@pytest.mark.slow
@pytest.mark.parametrize("data", ["café".encode(), "東京".encode(), b"x  1.5"])
async def test_smollm2_equals_the_oracle(hf_models, data):
    """The real model, float64, against brute-force enumeration (tests/shared/byte_oracle.py)."""
    from byte_oracle import ByteOracle

    loaded = hf_models("smollm2")
    model = type(loaded.model).from_pretrained(loaded.path)
    lm = Float64TorchLM(model, loaded.tokenizer)
    oracle = ByteOracle(lm.model, loaded.tokenizer)
    eos_ids = [loaded.tokenizer.eos_token_id]
    state = await ExactByteState.initial(lm, eos_byte_strings=[bytes(lm.byte_vocab[eos_ids[0]])])
    state = await state.prefill(data)
    got, want = (await state.logp_next()).ps, oracle.next_byte_logprobs(data, True, eos_ids)
    likely = np.exp(want) > 1e-6
    assert np.abs(got[likely] - want[likely]).max() < 1e-6
    assert state.logZ == pytest.approx(oracle.log_prefix_prob(data, True, eos_ids), abs=1e-6)


@pytest.mark.slow
async def test_close_to_the_unpruned_beam_on_smollm2(smollm2):
    """The beam sums over every tokenization: the difference is the non-canonical mass."""
    eos = [bytes(smollm2.byte_vocab[smollm2.tokenizer.eos_token_id])]
    exact = await (await ExactByteState.initial(smollm2, eos_byte_strings=eos)).prefill(TEXT[:60])
    params = BeamParams(K=16, prune_threshold=0.0, eos_byte_strings=eos)
    beam = await (await ByteBeamState.initial(smollm2, params)).prefill(TEXT[:60])
    p, q = np.exp((await exact.logp_next()).ps), np.exp((await beam.logp_next()).ps)
    assert 0.5 * np.abs(p - q).sum() < 1e-2
    assert exact.logZ <= beam.logZ + 1e-6  # canonical covers are a subset of all covers

"""ExactByteState against brute-force enumeration (tests/shared/byte_oracle.py).

The tiny GPT-2 and Llama-3 test models, run in float64 by a minimal third-party AsyncLM
(tests/shared/torch_lm.py); the oracle enumerates every tokenization with plain
transformers forwards and asks the tokenizer's encoder which are canonical. Byte
strings of up to 8 bytes with spaces, digits, punctuation, newlines and multi-byte
UTF-8 (some ending inside a character). Wherever the oracle's probability exceeds
1e-6, log-probabilities agree within 1e-6 (measured: ~1e-14).

The same oracle without the canonical filter checks ``ByteBeamState(K=large,
prune_threshold=0)``, which sums over every tokenization (exact in that limit).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from byte_oracle import ByteOracle
from torch_lm import Float64TorchLM
from transformers import AutoModelForCausalLM, AutoTokenizer

from genlm_bytelm import BeamParams, ByteBeamState, ExactByteState

TOLERANCE = 1e-6
#: Probabilities below this are not compared in log space (the issue's bar).
FLOOR = 1e-6

STRINGS = {
    "words": b"The cat",
    "newlines": b"a\n\nb",
    "spaces-digits": b"x  1.5",
    "contraction-digits": b"it's 42",
    "utf8": "é中".encode(),
    "inside-a-character": b"caf\xc3",
    "emoji-punctuation": "😀!".encode(),
    "tab-dashes-newline": b"\t-- \n",
}
#: Run by default on each model; the rest are thorough (nightly).
DEFAULT = {
    "tiny-gpt2": {"words", "newlines", "utf8", "inside-a-character", "spaces-digits"},
    "tiny-llama3": {"contraction-digits", "inside-a-character"},
}


def _cases():
    for model in ("tiny-gpt2", "tiny-llama3"):
        for name in STRINGS:
            marks = [] if name in DEFAULT[model] else [pytest.mark.thorough]
            yield pytest.param(model, name, marks=marks, id=f"{model}-{name}")


class Loaded:
    def __init__(self, path):
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64).eval()
        self.lm = Float64TorchLM(model, self.tokenizer)
        self.oracle = ByteOracle(model, self.tokenizer)
        self.eos_ids = [self.tokenizer.eos_token_id]
        self.eos = [bytes(self.lm.byte_vocab[i]) for i in self.eos_ids]


@pytest.fixture(scope="module")
def loaded(asset_model_dir):
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = Loaded(str(asset_model_dir(name)))
        return cache[name]

    return get


def assert_close(got, want):
    big = np.exp(want) > FLOOR
    assert np.all(np.exp(got[~big]) <= FLOOR + TOLERANCE), "mass where the oracle has none"
    worst = float(np.max(np.abs(got[big] - want[big])))
    bad = [(i, got[i], want[i]) for i in np.flatnonzero(big) if abs(got[i] - want[i]) > TOLERANCE]
    assert worst < TOLERANCE, f"max |log p - oracle| = {worst:.3g}; first: {bad[:4]}"


@pytest.mark.parametrize("model, name", list(_cases()))
async def test_next_byte_logprobs_equal_the_oracle(loaded, model, name):
    m = loaded(model)
    data = STRINGS[name]
    state = await ExactByteState.initial(m.lm, eos_byte_strings=m.eos)
    prefilled = await state.prefill(data)
    got = (await prefilled.logp_next()).ps
    assert_close(got, m.oracle.next_byte_logprobs(data, True, m.eos_ids))
    # logZ is the exact log-probability of every prefix read byte by byte
    current = state
    for k, b in enumerate(data, 1):
        current = await (current << b)
        want = m.oracle.log_prefix_prob(data[:k], True, m.eos_ids)
        assert current.logZ == pytest.approx(want, abs=TOLERANCE), data[:k]
    assert prefilled.logZ == pytest.approx(current.logZ, abs=1e-9)


@pytest.mark.parametrize(
    "model, name",
    [
        pytest.param("tiny-gpt2", "words", id="tiny-gpt2-words"),
        pytest.param("tiny-gpt2", "newlines", id="tiny-gpt2-newlines"),
        pytest.param("tiny-gpt2", "utf8", id="tiny-gpt2-utf8"),
        pytest.param(
            "tiny-llama3", "contraction-digits", id="tiny-llama3-digits", marks=pytest.mark.thorough
        ),
    ],
)
async def test_wide_beam_equals_the_unfiltered_oracle(loaded, model, name):
    """K large and no threshold: the beam sums over every tokenization (float32 trie sums)."""
    m = loaded(model)
    data = STRINGS[name]
    params = BeamParams(K=10_000, prune_threshold=0.0, eos_byte_strings=m.eos, heal=False)
    beam = await (await ByteBeamState.initial(m.lm, params)).prefill(data)
    got = (await beam.logp_next()).ps
    want = m.oracle.next_byte_logprobs(data, False, m.eos_ids)
    big = np.exp(want) > FLOOR
    # the beam's trie sums in float32: relative error ~1e-7 per mass
    assert float(np.max(np.abs(got[big] - want[big]))) < 1e-5
    assert beam.logZ == pytest.approx(m.oracle.log_prefix_prob(data, False, m.eos_ids), abs=1e-5)


async def test_eos_is_the_complete_canonical_encoding(loaded):
    """P(EOS) after a text: only its own encoding may end it (checked by the oracle)."""
    m = loaded("tiny-gpt2")
    state = await (await ExactByteState.initial(m.lm, eos_byte_strings=m.eos)).prefill(b"Hi")
    got = (await state.logp_next()).ps
    want = m.oracle.next_byte_logprobs(b"Hi", True, m.eos_ids)
    assert math.isfinite(got[257])
    assert got[257] == pytest.approx(want[257], abs=TOLERANCE)

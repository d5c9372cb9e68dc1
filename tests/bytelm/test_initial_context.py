"""The byte states start from ``initial_context`` when given (issue 27, point 6)."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

from genlm_bytelm import BeamParams, ByteBeamState, ExactByteState, MissingStartTokenError
from genlm_bytelm.exact.canonical import EMPTY
from genlm_core.errors import InvalidTokenIdsError


@pytest.fixture(scope="module")
def prompt(llm):
    return [llm.tokenizer.eos_token_id, *llm.tokenizer.encode("Question: 2+2?\nAnswer:")]


async def test_exact_state_starts_from_the_initial_context(llm, prompt):
    state = await ExactByteState.initial(llm, initial_context=prompt)
    assert [s.lm_state.context for s in state] == [prompt]
    # its weight: the mass of the canonical first tokens after the prompt, in float64
    row = (await llm.next_token_logprobs(prompt)).double().numpy()
    mask = state.shared.canon.mask(EMPTY)[: len(row)]
    expected = np.logaddexp.reduce(row[mask])
    assert state.logZ == pytest.approx(expected, abs=1e-9)
    default = await ExactByteState.initial(llm)
    assert state.logZ != pytest.approx(default.logZ, abs=1e-6)
    after = await state.prefill(b" 4")
    assert after.states and all(s.lm_state.context[: len(prompt)] == prompt for s in after)


async def test_start_token_as_initial_context_is_the_default(llm, eos):
    start = [llm.tokenizer.bos_token_id]
    a = await (await ExactByteState.initial(llm, eos_byte_strings=eos)).prefill(b"Hi there")
    b = await (
        await ExactByteState.initial(llm, eos_byte_strings=eos, initial_context=start)
    ).prefill(b"Hi there")
    assert a.logZ == b.logZ


async def test_beam_starts_from_the_initial_context(llm, prompt):
    beam = await ByteBeamState.initial(llm, BeamParams(K=4), initial_context=prompt)
    assert [s.lm_state.context for s in beam] == [prompt]
    after = await beam.prefill(b" 4")
    assert all(s.lm_state.context[: len(prompt)] == prompt for s in after)
    # genlm-bytes' positional trie_opts still come third
    again = await ByteBeamState.initial(llm, BeamParams(K=4), {}, initial_context=prompt)
    assert again.logZ == beam.logZ


@pytest.mark.parametrize(
    "bad,words",
    [
        ("Answer:", "encode text first"),
        (b"\x01", "encode text first"),
        ([], "is empty"),
        ([5, -1], "initial_context[1] = -1"),
        ([10**9], "initial_context[0] = 1000000000"),
        ([1.5], "initial_context[0] = 1.5"),
        (7, "must be a list of token ids"),
    ],
)
async def test_bad_initial_context_is_named(llm, bad, words):
    with pytest.raises(InvalidTokenIdsError, match=words.replace("[", r"\[")):
        await ExactByteState.initial(llm, initial_context=bad)
    with pytest.raises(InvalidTokenIdsError, match=words.replace("[", r"\[")):
        await ByteBeamState.initial(llm, BeamParams(K=2), initial_context=bad)


class _NoStartToken:
    """``llm`` seen through a tokenizer without BOS or EOS (Qwen-like, neither set)."""

    def __init__(self, llm):
        self._llm = llm
        self.tokenizer = types.SimpleNamespace(bos_token_id=None, eos_token_id=None)
        self.byte_vocab = llm.byte_vocab

    async def next_token_logprobs(self, ids):
        return await self._llm.next_token_logprobs(ids)

    async def batch_next_token_logprobs(self, batch):
        return await self._llm.batch_next_token_logprobs(batch)


async def test_missing_start_token_points_to_initial_context(llm):
    model = _NoStartToken(llm)
    with pytest.raises(MissingStartTokenError, match=r"initial_context=.*ByteBeamState\.initial"):
        await ByteBeamState.initial(model, BeamParams(K=2))
    beam = await ByteBeamState.initial(model, BeamParams(K=2), initial_context=[0])
    assert isinstance((await beam.logp_next()).ps, torch.Tensor | np.ndarray)

"""Ported from genlm-bytes 0.2.0 tests/test_healing.py (Apache-2.0), the tests with a model.

The hub model "gpt2" is the tiny GPT-2 asset: GPT-2's tokenizer, which decides healing.
"""

import numpy as np
import pytest

from genlm_bytelm import BeamParams, ByteBeamState

TEXT = ". Boulter starred in the 2011 film Mercenaries directed by Paris Leonti ."
VALKYRIA = "= Valkyria Chronicles III =Senjō no Valkyria 3 : Unrecorded Chronicles ( Japanese : 戦場のヴァルキュリア3 , li"
AMAZING = "Wait... what?! That's amazing-truly incredible!"

HEAL_TEST_CASES = [
    ("Boulter", TEXT),
    ("Valkyria", VALKYRIA),
    ("Amazing", AMAZING),
]


@pytest.fixture(scope="module")
def llm(hf_models):  # hub "gpt2": healing depends on GPT-2's tokenizer, which tiny-gpt2 has
    model = hf_models("tiny-gpt2").lm()
    yield model
    model.cleanup()


async def _advance_bytes(llm, text: str, heal: bool, heal_max_backoff=None, heal_max_splits=None):
    """Helper to advance through text bytes and check if healing works."""
    # byte_vocab contains Token objects - get the byte_string for eos_byte_strings
    eos_token = llm.byte_vocab[llm.tokenizer.eos_token_id].byte_string
    beam = await ByteBeamState.initial(
        llm,
        BeamParams(
            K=1,
            eos_byte_strings=[eos_token],
            heal=heal,
            heal_max_backoff=heal_max_backoff,
            heal_max_splits=heal_max_splits,
            verbose=True,
        ),
    )
    try:
        bs = text.encode("utf-8")
        current = beam
        for idx, b in enumerate(bs):
            next_beam = await (current.prune() << b)
            if len(next_beam) == 0:
                return False, idx, current
            current = next_beam

        return True, None, current
    finally:
        await beam.cleanup()


# -------------------------
# Core healing tests
# -------------------------


@pytest.mark.asyncio
async def test_heal_disabled_fails(llm):
    """Without healing, K=1 beam fails on this text."""
    ok, fail_idx, _ = await _advance_bytes(llm, TEXT, heal=False)
    assert not ok, "Expected failure with heal disabled"
    assert isinstance(fail_idx, int)


@pytest.mark.asyncio
@pytest.mark.parametrize("name,text", HEAL_TEST_CASES)
async def test_heal_succeeds(llm, name, text):
    """With healing, K=1 beam completes various texts."""
    ok, _, state = await _advance_bytes(llm, text, heal=True)
    assert ok, f"Healing should complete: {name}"
    logp_next = await state.logp_next()
    assert logp_next[257] > -np.inf, f"EOS should be reachable: {name}"


@pytest.mark.asyncio
async def test_heal_max_backoff_limited_fails(llm):
    """With limited backoff, healing fails on difficult text."""
    ok, fail_idx, _ = await _advance_bytes(llm, TEXT, heal=True, heal_max_backoff=2)
    assert not ok, "Expected failure with heal_max_backoff=2"
    assert isinstance(fail_idx, int)


@pytest.mark.asyncio
async def test_heal_max_splits_zero(llm):
    """With max_splits=0, multi-split is disabled so VALKYRIA text fails."""
    ok, fail_idx, _ = await _advance_bytes(llm, VALKYRIA, heal=True, heal_max_splits=0)
    assert not ok, "Expected failure with max_splits=0 on VALKYRIA text"
    assert isinstance(fail_idx, int)


# -------------------------
# ByteBeamState API tests
# -------------------------


@pytest.mark.asyncio
async def test_prefill_and_prune(llm):
    """Test prefill and prune with real LLM."""
    state = await ByteBeamState.initial(llm, BeamParams(K=3))
    try:
        prefilled = await state.prefill(b"Hello ")
        assert len(prefilled.states) > 0

        pruned = prefilled.prune()
        assert isinstance(pruned, ByteBeamState)
        assert len(pruned.states) <= 3
    finally:
        await state.cleanup()


@pytest.mark.asyncio
async def test_logp_next(llm):
    """Test logp_next returns valid probabilities."""
    state = await ByteBeamState.initial(llm, BeamParams(K=1))
    try:
        prefilled = await state.prefill(b"The ")
        logp = await prefilled.logp_next()

        # logp_next returns LazyByteProbs, access via indexing
        assert logp[ord("a")] <= 0
        assert logp[ord(" ")] <= 0
        assert logp[257] <= 0 or logp[257] == -np.inf
    finally:
        await state.cleanup()

"""Our byte beam against genlm-bytes 0.2.0 itself, over the same model object.

The model is MockAsyncLM over GPT-2's tokenizer: pseudo-random next-token
distributions, so the beam meets many tokenizations, prunes, heals and empties.
See ``tests/shared/genlm_bytes_reference.py`` for why genlm-bytes is compared with
exact sums (1e-5) and, as shipped, at the tolerance its float32 sums allow.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from genlm_bytes_reference import TEXTS, exact_sums, max_deviation, their_beam

import genlm_bytelm as ours

pytestmark = pytest.mark.filterwarnings("ignore:Sparse:UserWarning")  # inside genlm-bytes

EXACT = 1e-5
#: genlm-bytes' own float32 summation error, measured: up to ~2e-4 on SmolLM2.
STOCK = 1e-3


@pytest.mark.parametrize("text", list(TEXTS))
@pytest.mark.parametrize(
    "k, threshold, length",
    [(1, 0.0, None), (4, 0.05, None), (4, 0.0, None), (16, 0.05, None), (16, 0.0, 24)],
)
async def test_next_byte_logprobs_equal_exact_genlm_bytes(llm, eos, text, k, threshold, length):
    data = TEXTS[text][:length]
    with exact_sums():
        worst = await max_deviation(llm, data, K=k, prune_threshold=threshold, eos_byte_strings=eos)
    assert worst < EXACT


@pytest.mark.parametrize(
    "heal, backoff, splits",
    [(False, None, None), (True, None, None), (True, 2, None), (True, None, 0)],
)
async def test_healing_and_its_limits_agree(llm, eos, heal, backoff, splits):
    """genlm-bytes' healing test loop (K=1, prune then read), compared at every byte."""
    import genlm.bytes as theirs

    kwargs = dict(K=1, heal=heal, heal_max_backoff=backoff, heal_max_splits=splits)
    with exact_sums():
        t = await their_beam(llm, theirs.BeamParams(eos_byte_strings=eos, **kwargs))
        o = await ours.ByteBeamState.initial(llm, ours.BeamParams(eos_byte_strings=eos, **kwargs))
        for b in TEXTS["english"]:
            t, o = await (t.prune() << b), await (o.prune() << b)
            assert len(t) == len(o)
            if not len(o):
                break  # healing failed (or was off) at the same byte
            assert [s.weight - t.logZ for s in t] == pytest.approx(
                [s.weight - o.logZ for s in o], abs=EXACT
            )
        if len(o):
            tl, ol = (await t.logp_next()).ps, (await o.logp_next()).ps
            finite = np.isfinite(tl)
            assert np.array_equal(finite, np.isfinite(ol))
            assert np.abs(tl[finite] - ol[finite]).max() < EXACT


async def test_eos_and_stepping_without_prune_agree(llm, eos):
    import genlm.bytes as theirs

    their_params = theirs.BeamParams(K=4, eos_byte_strings=eos)
    our_params = ours.BeamParams(K=4, eos_byte_strings=eos)
    with exact_sums():
        t = await (await their_beam(llm, their_params)).prefill(b"Hello there")
        o = await (await ours.ByteBeamState.initial(llm, our_params)).prefill(b"Hello there")
        for b in b", you":  # << without prune: the whole unpruned beam
            t, o = await (t << b), await (o << b)
            assert [s.weight - t.logZ for s in t] == pytest.approx(
                [s.weight - o.logZ for s in o], abs=EXACT
            )
        te, oe = await (t << ours.EOS), await (o << ours.EOS)
        assert len(te) == len(oe) and all(s.terminated for s in oe)
        assert te.logZ - t.logZ == pytest.approx(oe.logZ - o.logZ, abs=EXACT)
        tl, ol = (await t.logp_next()), (await o.logp_next())
        assert tl[ours.EOS] == pytest.approx(ol[ours.EOS], abs=EXACT) and ol[ours.EOS] > -np.inf


@pytest.mark.parametrize("text", list(TEXTS))
async def test_next_byte_logprobs_near_stock_genlm_bytes(llm, eos, text):
    worst = await max_deviation(llm, TEXTS[text], K=4, prune_threshold=0.05, eos_byte_strings=eos)
    assert worst < STOCK


def test_our_masses_are_the_exact_sums_genlm_bytes_approximates(llm):
    from genlm.bytes.trie import TokenByteTrie as TheirTrie

    probs = torch.exp(llm.next_token_logprobs_sync([llm.tokenizer.bos_token_id]))
    exact = ours.TokenByteTrie(llm.byte_vocab).weight_sum(probs.double()).double()
    mine = ours.TokenByteTrie(llm.byte_vocab).weight_sum(probs).double()
    theirs = TheirTrie(llm.byte_vocab, device="cpu").weight_sum(probs).double()
    err_mine = ((mine - exact).abs() / exact.clamp_min(1e-30)).max().item()
    err_theirs = ((theirs - exact).abs() / exact.clamp_min(1e-30)).max().item()
    assert err_mine < 1e-6 < err_theirs

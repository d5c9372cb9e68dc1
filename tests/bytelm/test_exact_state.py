"""ExactByteState's interface and invariants, on MockAsyncLM over GPT-2's tokenizer.

The mock's distributions are pseudo-random: non-canonical tokenizations carry much of
the mass, so what these tests check is the machinery (prefill == reading byte by byte,
speculation changes no result, errors, EOS, one batched model call per step), not
closeness to the beam. Exactness itself is tested against the oracle
(test_exact_oracle.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from genlm_bytelm import (
    EOS,
    EmptyBeamError,
    ExactByteState,
    InvalidBeamParamsError,
    InvalidByteError,
)

TEXTS = [b"Hello, world!", b"a\n\n  b", "naïve 中文".encode(), b"x = 12345;", b"caf\xc3"]


async def read(state, data):
    for b in data:
        state = await (state << b)
    return state


@pytest.mark.parametrize("data", TEXTS)
async def test_prefill_equals_reading_byte_by_byte(llm, eos, data):
    start = await ExactByteState.initial(llm, eos_byte_strings=eos)
    fast = await start.prefill(data)
    slow = await read(start, data)
    assert fast.logZ == pytest.approx(slow.logZ, abs=1e-9)
    np.testing.assert_allclose((await fast.logp_next()).ps, (await slow.logp_next()).ps, atol=1e-9)
    assert sorted(str(s) for s in fast) == sorted(str(s) for s in slow)
    for cut in range(1, len(data)):  # in two pieces: the first may end inside a token
        pieces = await (await start.prefill(data[:cut])).prefill(data[cut:])
        assert pieces.logZ == pytest.approx(slow.logZ, abs=1e-9), cut


@pytest.mark.parametrize("data", TEXTS[:3])
async def test_speculation_changes_no_result(llm, eos, data):
    plain = await ExactByteState.initial(llm, eos_byte_strings=eos, speculate=False)
    ahead = await ExactByteState.initial(llm, eos_byte_strings=eos, speculate=True)
    assert await plain.greedy(data, 12) == await ahead.greedy(data, 12)
    a = await read(await plain.prefill(data[:3]), data[3:])
    b = await read(await ahead.prefill(data[:3]), data[3:])
    np.testing.assert_allclose((await a.logp_next()).ps, (await b.logp_next()).ps, atol=1e-12)


async def test_next_byte_distribution_is_normalised(llm, eos):
    state = await (await ExactByteState.initial(llm, eos_byte_strings=eos)).prefill(b"The ")
    ps = (await state.logp_next()).ps
    assert ps.shape == (258,)
    assert ps[256] == -np.inf  # end-of-token is never a next byte
    assert np.exp(ps).sum() == pytest.approx(1.0, abs=1e-12)


async def test_greedy_and_sample(llm, eos):
    state = await ExactByteState.initial(llm, eos_byte_strings=eos)
    out = await state.greedy(b"An apple", 8)
    assert out.startswith(b"An apple") and len(out) <= len(b"An apple") + 8
    np.random.seed(0)
    drawn = await state.sample(b"An apple", 8)
    assert drawn.startswith(b"An apple")
    assert state.prune() is state  # nothing to prune


async def test_next_byte_log_odds_are_prefix_log_odds(llm, eos):
    """``logp_next`` is ``q(b + x)`` normalised: differences equal those of ``logZ``."""
    state = await (await ExactByteState.initial(llm, eos_byte_strings=eos)).prefill(b"Hi")
    ps = (await state.logp_next()).ps
    ended = await (state << EOS)
    assert all(s.terminated for s in ended) and len(ended) > 0
    for x in [ord(" "), ord("!"), ord("s"), 0xC3, ord("\n")]:
        after = await (state << x)
        assert ps[x] - ps[EOS] == pytest.approx(after.logZ - ended.logZ, abs=1e-9)


async def test_bytes_no_text_can_have_have_zero_probability(llm):
    state = await ExactByteState.initial(llm)
    empty = await (state << 0xFF)  # 0xFF is never in UTF-8 text
    assert len(empty) == 0 and empty.logZ == -np.inf
    with pytest.raises(EmptyBeamError, match="probability is 0"):
        await empty.logp_next()
    with pytest.raises(EmptyBeamError):
        await (empty << 65)


async def test_bad_arguments_are_named(llm):
    state = await ExactByteState.initial(llm)
    with pytest.raises(InvalidByteError, match="300"):
        await (state << 300)
    with pytest.raises(InvalidBeamParamsError, match="wrap it"):
        await ExactByteState.initial(llm, eos_byte_strings=b"<|endoftext|>")
    with pytest.raises(InvalidByteError, match="encode it first"):
        await state.prefill("text")


async def test_each_step_is_one_batched_model_call(llm, eos):
    llm.clear_cache()
    state = await ExactByteState.initial(llm, eos_byte_strings=eos, speculate=False)
    state = await state.prefill(b"The quick brown")
    for b in b" fox jumps":
        before = len(llm.batches)
        await state.logp_next()
        assert len(llm.batches) - before <= 1  # every context of a step in one batch
        state = await (state << b)


async def test_cleanup_keeps_the_shared_trie(llm, eos):
    state = await ExactByteState.initial(llm, eos_byte_strings=eos)
    await state.cleanup()
    again = await ExactByteState.initial(llm, eos_byte_strings=eos)
    assert again.shared.trie is state.shared.trie  # built once per model and options
    assert (await (await again.prefill(b"ok")).logp_next()).ps.shape == (258,)


def test_spellings_longer_are_the_tokens_that_extend_a_prefix():
    """Two bisections give the tokens that start with a prefix and are longer, edges included."""
    from genlm_bytelm.exact.plan import Spellings

    vocab = [b"a", b"ab", b"ab", b"abc", b"ac", b"b", b"a\xff", b"a\xff\x00", b"\xff", b"\xff\xff"]
    vocab += [b"", b"\xff\xff\x01", b"b\x00", b"aa"]
    spell = Spellings(vocab, lambda i: i != 4)  # "ac" left out
    for prefix in [b"a", b"ab", b"abc", b"a\xff", b"\xff", b"\xff\xff", b"b", b"z", b"\x00"]:
        lo, hi = spell.longer(prefix)
        longer = [i for i, b in enumerate(vocab) if len(b) > len(prefix) and b.startswith(prefix)]
        want = sorted(i for i in longer if i != 4)
        assert sorted(spell.ids[lo:hi]) == want, prefix
        assert sorted(spell.id_array[lo:hi].tolist()) == want, prefix

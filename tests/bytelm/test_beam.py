"""ByteBeamState beyond genlm-bytes: errors, the prefill shortcuts, memory, sharing.

MockAsyncLM's output depends only on the context, never on the batch it was computed
in, so beams computed with and without the shortcuts must be *identical*.
"""

from __future__ import annotations

import asyncio
import gc
import math
import random
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

import genlm_bytelm.byte_lm.prefill as prefill_module
import genlm_bytelm.shared_tries as shared_tries
from genlm_bytelm import (
    EOS,
    BeamParams,
    ByteBeamState,
    EmptyBeamError,
    InvalidBeamParamsError,
    InvalidByteError,
    LazyTrieState,
    NotMaterializedError,
    StatefulTokenizedLM,
)
from genlm_bytelm.byte_lm.pruning import certainly_dropped, decisions_unchanged
from genlm_core.errors import GenlmError, UnsupportedTokenizerError
from genlm_core.testing import MockAsyncLM
from genlm_core.testing.assets import tokenizer_dir

TEXT = "The café opened in 1987; its owner said: «Bienvenue!» \U0001f600\n".encode()


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(tokenizer_dir("gpt2-npm"))


@pytest.fixture
def llm(tokenizer):
    model = MockAsyncLM(tokenizer, temperature=0.3)
    yield model
    model.cleanup()


async def stepwise_prefill(beam, data):
    """genlm-bytes' prefill, literally: prune then read, in WITHOUT_EOS mode."""
    from genlm_bytelm import TrieMode

    beam = beam.with_mode(TrieMode.WITHOUT_EOS)
    for b in data:
        beam = await (beam.prune() << b)
    return beam.with_mode(TrieMode.WITH_EOS)


def same_beam(a, b):
    assert [s.lm_state.context for s in a] == [s.lm_state.context for s in b]
    assert [s.node for s in a] == [s.node for s in b]
    assert [s.weight for s in a] == [s.weight for s in b]


# -- the shortcuts change nothing --------------------------------------------------------


@pytest.mark.parametrize("k, threshold", [(1, 0.0), (4, 0.05), (4, 0.0), (16, 0.0)])
async def test_prefill_equals_reading_byte_by_byte(llm, k, threshold):
    params = BeamParams(K=k, prune_threshold=threshold)
    fast = await (await ByteBeamState.initial(llm, params)).prefill(TEXT)
    calls_fast = sum(llm.batches)
    slow_llm = MockAsyncLM(
        llm.tokenizer, temperature=0.3, byte_vocab=(llm.byte_vocab, llm.str_vocab)
    )
    slow = await stepwise_prefill(await ByteBeamState.initial(slow_llm, params), TEXT)
    same_beam(fast, slow)
    np.testing.assert_array_equal((await fast.logp_next()).ps, (await slow.logp_next()).ps)
    if k == 16:  # without a threshold, candidates the next prune drops are never computed
        assert calls_fast < sum(slow_llm.batches)
    slow_llm.cleanup()


async def test_prefill_over_windows_partial_tokens_and_invalid_utf8(llm, monkeypatch):
    monkeypatch.setattr(prefill_module, "WINDOW_BYTES", 7)  # many windows
    data = b"\xff\xfe broken \xe6\x97 UTF-8, then fine text " * 2
    params = BeamParams(K=4, prune_threshold=0.05)
    start = await (await ByteBeamState.initial(llm, params)).prefill(b"Hel")  # mid-token
    fast = await start.prefill(data)
    slow = await stepwise_prefill(start, data)
    same_beam(fast, slow)


async def test_read_ahead_asks_for_the_path_in_one_prefix_call(llm):
    calls = []
    original = llm.prefix_next_token_logprobs

    async def spy(token_ids, lora_name=None, *, start=0):
        calls.append((len(token_ids), start))
        return await original(token_ids, lora_name, start=start)

    llm.prefix_next_token_logprobs = spy
    beam = await ByteBeamState.initial(llm, BeamParams(K=4, prune_threshold=0.05))
    await beam.prefill(TEXT)
    n_tokens = len(llm.tokenizer.encode(TEXT.decode()))
    assert calls == [(1 + n_tokens, 0)]  # BOS + the text's tokens, from the BOS on


async def test_canonical_tokens_spell_the_bytes_exactly(llm):
    from genlm_bytelm.byte_lm.prefill import canonical_tokens

    trie = (await shared_tries.shared_trie_async(llm, set())).trie
    for data in (TEXT, b"\xff\xfeabc", b"caf\xc3", b""):
        tokens = canonical_tokens(llm, trie, data)
        assert b"".join(bytes(llm.byte_vocab[t]) for t in tokens) == data


weights = st.floats(min_value=-30, max_value=0, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(
    known=st.lists(weights, max_size=6),
    bounds=st.lists(weights, min_size=1, max_size=4),
    k=st.integers(1, 5),
    threshold=st.sampled_from([0.0, 0.01, 0.05, 0.3]),
    data=st.data(),
)
def test_pruning_rule_against_brute_force(known, bounds, k, threshold, data):
    """A candidate said to be dropped is dropped by prune for every weight it may take."""
    log_t = math.log(threshold) if threshold else -math.inf
    dropped = certainly_dropped(bounds, known, k, log_t)
    left_out = [b for b, d in zip(bounds, dropped, strict=True) if d]
    kept = [b for b, d in zip(bounds, dropped, strict=True) if not d]
    if not known or not decisions_unchanged(known, left_out, log_t):
        return  # the beam computes them all then
    # Any actual weights at or below the bounds (or no state at all):
    actual = [data.draw(st.one_of(st.none(), st.floats(-60, b))) for b in left_out]
    others = [data.draw(st.floats(-60, b)) for b in kept]

    def prune(ws):
        z = np.logaddexp.reduce(ws)
        return sorted((w for w in ws if w - z > log_t), reverse=True)[:k]

    full = prune([*known, *others, *(w for w in actual if w is not None)])
    without = prune([*known, *others])
    assert full == without


# -- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"K": 0}, "K (the beam width) must be an integer >= 1, got 0"),
        ({"K": 2.5}, "got 2.5"),
        ({"K": 3, "prune_threshold": -0.1}, "prune_threshold must be non-negative"),
        ({"K": 3, "prune_threshold": 1.0}, "below 1"),
        ({"K": 3, "heal_max_backoff": -1}, "heal_max_backoff must be None"),
        ({"K": 3, "heal_max_splits": "2"}, "heal_max_splits must be None"),
        ({"K": 3, "eos_byte_strings": [".", "!"]}, "encode it: b'.'"),
        ({"K": 3, "eos_byte_strings": b"!"}, "wrap it: [b'!']"),
    ],
)
def test_bad_params(kwargs, fragment):
    with pytest.raises(InvalidBeamParamsError, match=re.escape(fragment)) as info:
        BeamParams(**kwargs)
    assert isinstance(info.value, ValueError | TypeError) and isinstance(info.value, GenlmError)


async def test_bad_bytes_and_empty_beams(llm):
    beam = await ByteBeamState.initial(llm, BeamParams(K=2))
    for bad in (256, -1, 300, "a", 1.0, None, True):
        with pytest.raises(InvalidByteError, match=re.escape(repr(bad))):
            await (beam << bad)
    with pytest.raises(InvalidByteError, match=r"encode\('utf-8'\)"):
        await beam.prefill("text")
    empty = ByteBeamState([], beam.params)
    with pytest.raises(EmptyBeamError, match="empty"):
        await empty.logp_next()
    with pytest.raises(AssertionError):  # genlm-bytes' assert, still caught as such
        await (empty << 65)
    state = LazyTrieState.initial(llm, beam.states[0].trie)
    with pytest.raises(NotMaterializedError, match="not yet materialized"):
        state.mass  # noqa: B018
    assert (await beam.greedy(b"ab", 0)) == b"ab"
    with pytest.raises(InvalidByteError, match="steps"):
        await beam.greedy(b"ab", -1)


def test_a_tokenizer_that_cannot_be_decoded_is_refused():
    tok = AutoTokenizer.from_pretrained(tokenizer_dir("bert-minilm"))
    with pytest.raises(UnsupportedTokenizerError, match="WordPiece"):
        MockAsyncLM(tok)


def test_context_starts_with_bos_else_eos(tokenizer):
    class NoBos:
        bos_token_id = None
        eos_token_id = 7

    class Neither:
        bos_token_id = eos_token_id = None

    class Model:
        def __init__(self, tok):
            self.tokenizer = tok

    assert StatefulTokenizedLM.initial(Model(NoBos())).context == [7]
    with pytest.raises(GenlmError, match="initial_context"):
        StatefulTokenizedLM.initial(Model(Neither()))


async def test_generation_stops_at_eos(llm, tokenizer):
    eos = bytes(llm.byte_vocab[tokenizer.eos_token_id])
    beam = await ByteBeamState.initial(llm, BeamParams(K=3, eos_byte_strings=[eos]))
    always_eos = lambda chart: EOS  # noqa: E731
    assert await beam.sample(b"Hi", 10, draw=always_eos) == b"Hi"


# -- memory, sharing, concurrency ----------------------------------------------------------


async def test_dropped_states_leave_no_mass_arrays_behind(llm):
    n_nodes = (await shared_tries.shared_trie_async(llm, set())).trie.num_nodes

    def live_masses():
        gc.collect()
        return sum(1 for o in gc.get_objects() if type(o) is np.ndarray and o.shape == (n_nodes,))

    beam = await ByteBeamState.initial(llm, BeamParams(K=4, prune_threshold=0.05))
    counts = []
    rng = random.Random(0)
    for step in range(120):
        beam = await (beam.prune() << rng.choice(b"abcdefgh "))
        if len(beam) == 0:
            beam = await ByteBeamState.initial(llm, beam.params)
        if step % 30 == 29:
            counts.append(live_masses())
    assert max(counts) <= 4 * (beam.params.K + 1)  # the live beam's, not every step's


async def test_beams_over_one_model_share_the_trie_and_its_batches(llm):
    params = BeamParams(K=4, prune_threshold=0.05)
    beams = [await ByteBeamState.initial(llm, params) for _ in range(8)]
    assert len({id(b.states[0].trie) for b in beams}) == 1
    llm.batches.clear()
    texts = [f"Story {i}: once upon a time".encode() for i in range(8)]
    outs = await asyncio.gather(*(b.greedy(t, 6) for b, t in zip(beams, texts, strict=True)))
    assert all(o.startswith(t) and len(o) == len(t) + 6 for o, t in zip(outs, texts, strict=True))
    assert max(llm.batches) > 1  # calls of different beams shared batches
    solo = await ByteBeamState.initial(llm, params)
    assert await solo.greedy(texts[3], 6) == outs[3]  # and results are those of one beam alone
    for b in beams:
        await b.cleanup()
    assert (await beams[0].logp_next()).ps.shape == (258,)  # a shared trie lives on


def test_every_genlm_bytes_name_is_here_under_the_renamed_path():
    """Migrating is an import rename: each module's own public definitions exist."""
    import importlib

    modules = ["", ".trie", ".util", ".byte_lm", ".byte_lm.beam", ".byte_lm.trie_state"]
    modules += [".byte_lm.lm_state", ".byte_lm.heal"]
    missing = []
    for suffix in modules:
        theirs = importlib.import_module("genlm.bytes" + suffix)
        ours = importlib.import_module("genlm_bytelm" + suffix)
        for name in getattr(theirs, "__all__", None) or dir(theirs):
            value = getattr(theirs, name)
            own = getattr(value, "__module__", "") or ""
            if name.startswith("_") or not (own.startswith("genlm.bytes") or name == "EOS"):
                continue
            if name == "TrieOp":  # names genlm-bytes' private queue operations (migrating.md)
                continue
            if not hasattr(ours, name):
                missing.append(f"genlm_bytelm{suffix}.{name}")
    assert not missing

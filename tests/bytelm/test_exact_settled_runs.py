"""Settled runs: ``prefill`` reads a known text on with the tokenizer's own encoding.

Past a pre-token boundary that no later text can move, a text has one canonical
tokenization, so the prefill takes it from the encoder (``CanonicalFilter.settled_run``)
instead of trying every token at every byte (docs/bytes-design.md, *Long texts*). These tests
hold it to the byte-by-byte reading (``exact_prefill.SETTLED_RUNS = False``) on every
byte-level family: the same candidates, weights within 1e-9 on the mock.
"""

from __future__ import annotations

import math
import unicodedata

import numpy as np
import pytest

from genlm_bytelm import ExactByteState
from genlm_bytelm.exact import prefill as exact_prefill
from genlm_bytelm.exact.canonical import EMPTY
from genlm_core.testing import MockAsyncLM

FAMILIES = ["gpt2-npm", "llama3", "qwen3", "o200k", "deepseek-v4"]

PIECES = [
    "The river town grew around a bridge built in 1234; its market drew traders from the "
    "coast, and by the census of 1871 it counted 12,345 households. ",
    "def step(state: dict[str, float], x: float) -> float:\n"
    "    if x <= 0 or state.get('rate', 1e-3) > 7:\n"
    "        return  state['value']   *  0x1f + x ** 2\n"
    "\treturn sum(v for v in state.values())  # TODO\n\n",
    "Digits 1234567890 and 3.14159265, 1,000,000 and 007 and 12345678901234567890. ",
    "| year | wheat (t) | barley (t) |\n|------|----------:|-----------:|\n"
    "=============================================!!!???...,,,;;;---___***\n",
    "line one\r\nline two\r\n\r\n  indented\r\n\t\tx\t = 1\t\t\n     \n",
    "Die Brücke — «ça suffit» — Москва — 東京は日本の首都です。 中文文本。 العربية. "
    "Ελληνικά: αβγ. 🙂👍 it's we'll THEY'RE don't\n\n",
]
TEXT = "".join(PIECES).encode()
#: o200k's byte-by-byte reading (the slow side of every comparison) costs about 0.1 s a
#: byte on CI's machine: by default it reads each piece's first 80 characters, and the
#: whole text with --slow (the same behaviour, a larger instance).
SHORT_TEXT = "".join(piece[:80] for piece in PIECES).encode()


def _text(name, thorough):
    return SHORT_TEXT if name == "o200k" and not thorough else TEXT


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, tokenizer_of):
    """``(name, MockAsyncLM)`` over one family's real tokenizer."""
    llm = MockAsyncLM(tokenizer_of(request.param), temperature=0.3)
    yield request.param, llm
    llm.cleanup()


def _start(name):
    return [0] if name == "deepseek-v4" else None  # its tokenizer names no BOS or EOS


async def _read(llm, name, parts, runs, window=None, lookahead=None):
    """The state after prefilling ``parts`` one after the other, settled runs on or off."""
    old = exact_prefill.SETTLED_RUNS, exact_prefill.WINDOW_BYTES, exact_prefill.LOOKAHEAD_BYTES
    exact_prefill.SETTLED_RUNS = runs
    exact_prefill.WINDOW_BYTES = window or old[1]
    exact_prefill.LOOKAHEAD_BYTES = old[2] if lookahead is None else lookahead
    try:
        state = await ExactByteState.initial(llm, initial_context=_start(name))
        for part in parts:
            state = await state.prefill(part)
        return state
    finally:
        (
            exact_prefill.SETTLED_RUNS,
            exact_prefill.WINDOW_BYTES,
            exact_prefill.LOOKAHEAD_BYTES,
        ) = old


def _same(a, b, finite=True):
    got = sorted((tuple(s.lm_state.context), bytes(s.partial), s.weight) for s in a)
    want = sorted((tuple(s.lm_state.context), bytes(s.partial), s.weight) for s in b)
    assert [g[:2] for g in got] == [w[:2] for w in want]
    np.testing.assert_allclose([g[2] for g in got], [w[2] for w in want], rtol=0, atol=1e-9)
    assert math.isfinite(a.logZ) == finite
    if finite:
        assert a.logZ == pytest.approx(b.logZ, abs=1e-9)


async def _compare(llm, name, *parts, finite=True, **windows):
    """The states after ``parts`` read with settled runs and byte by byte, checked equal."""
    fast = await _read(llm, name, parts, True, **windows)
    slow = await _read(llm, name, parts, False, **windows)
    _same(fast, slow, finite)
    return fast, slow


async def test_runs_give_the_byte_by_byte_result(family, thorough):
    name, llm = family
    text = _text(name, thorough)
    canon = (await ExactByteState.initial(llm, initial_context=_start(name))).shared.canon
    read = []
    offer = canon.settled_run

    def spy(text, start, pending, stop):
        run = offer(text, start, pending, stop)
        if run:
            read.append(sum(len(canon.byte_vocab[t]) for t in run[0]))
        return run

    canon.settled_run = spy
    try:
        fast, slow = await _compare(llm, name, text)
    finally:
        del canon.settled_run
    # the runs read the text but for its unsettled end (and a long run of one character)
    assert sum(read) > len(text) - 300, (sum(read), len(text))
    np.testing.assert_allclose((await fast.logp_next()).ps, (await slow.logp_next()).ps, atol=1e-9)


async def test_runs_across_short_windows(family, thorough):
    name, llm = family
    await _compare(llm, name, _text(name, thorough)[:900], window=48, lookahead=0)


@pytest.mark.parametrize(
    "ending",
    [
        b"beautif",  # mid-word
        "东京中文".encode()[:-1],  # mid-character
        b"end   ",  # in whitespace
        b"end\r\n",
        b"x = 1234",  # digits that may go on
        b"=====",  # punctuation that may go on
        b"it'",  # a contraction that may come
    ],
)
async def test_texts_ending_anywhere(family, ending, thorough):
    name, llm = family
    await _compare(llm, name, _text(name, thorough)[:300] + ending)


async def test_a_state_that_read_bytes_reads_on(family, thorough):
    """Roots from a state mid-text (mid-token candidates, pending parts before the text)."""
    name, llm = family
    text = _text(name, thorough)
    third = len(text) // 3
    await _compare(llm, name, b"Hello wor", text[: 2 * third])
    await _compare(llm, name, text[:third], text[third : 2 * third + third // 2])


@pytest.fixture(scope="module")
def qwen3(tokenizer_of):
    llm = MockAsyncLM(tokenizer_of("qwen3"), temperature=0.3)
    yield llm
    llm.cleanup()


@pytest.mark.parametrize(
    "middle",
    [
        "x\u0301 q\u0308\u0301 q\u0323\u0307 é ñ ü",  # combining marks that keep it NFC
        "한국어 텍스트 한글 가각 \u1100\u1100",  # syllables, lone leading jamo
        " \u0301\u0301 \u05d0\u05b7 \u0915\u094d\u0937",  # lone marks, Hebrew, Devanagari
    ],
)
async def test_qwen3_nfc_texts(qwen3, middle):
    data = (PIECES[0] + middle + " " + PIECES[2] + PIECES[0]).encode()
    assert unicodedata.is_normalized("NFC", data.decode())
    await _compare(qwen3, "qwen3", data)


@pytest.mark.parametrize("bad", ["e\u0301", "\u1112\u1161\u11ab", "\u0041\u030a", "a\u0323\u0302"])
async def test_qwen3_non_nfc_texts_have_probability_zero(qwen3, bad):
    """A text NFC rewrites has no canonical tokenization: the runs must not read past it."""
    data = (PIECES[0] * 2 + "word " + bad + " more " + PIECES[0] * 2).encode()
    fast, _ = await _compare(qwen3, "qwen3", data, finite=False)
    assert not fast.states
    prefix = (PIECES[0] * 2 + "word ").encode()
    await _compare(qwen3, "qwen3", prefix)  # the text before it is fine


def _key(state):
    """What a filter state holds (an added-token filter's wraps the inner filter's)."""
    if hasattr(state, "inner"):
        return (_key(state.inner), state.tail, state.spans, state.run_end, state.after_rstrip)
    return (state.ids, state.data, state.segment)


def _replayed(canon, pending, tokens):
    for t in tokens:
        pending = canon.extend(pending, t)
    return pending


async def test_settled_run_is_the_encoding_with_extends_pending(family):
    name, llm = family
    canon = (await ExactByteState.initial(llm, initial_context=_start(name))).shared.canon
    encoding = llm.tokenizer.encode(TEXT.decode(), add_special_tokens=False)
    tokens, end = canon.settled_run(TEXT, 0, EMPTY, len(TEXT))
    assert encoding[: len(tokens)] == tokens
    spelled = b"".join(canon.byte_vocab[t] for t in tokens)
    assert len(TEXT) - 20 < len(spelled) < len(TEXT)  # up to the last settled boundary
    want = _replayed(canon, EMPTY, tokens)
    assert _key(end) == _key(want)
    # from a context inside the text, mid-word: on from where its pending part starts
    k = 37
    pending = _replayed(canon, EMPTY, encoding[:k])
    at = len(b"".join(canon.byte_vocab[t] for t in encoding[:k]))
    more, end = canon.settled_run(TEXT, at, pending, at + 200)
    assert more and encoding[k : k + len(more)] == more
    want = _replayed(canon, pending, more)
    assert _key(end) == _key(want)
    # a context that is not the text's encoding, or ends inside a character: none
    other = canon.extend(EMPTY, canon.byte_vocab.index(b"T"))
    assert canon.settled_run(TEXT, 1, other, 200) is None
    partial = canon.extend(EMPTY, canon.byte_vocab.index(b"\xe6"))
    assert (
        getattr(partial, "inner", partial).partial
        and canon.settled_run(b"\xe6\x9d\xb1 x y", 1, partial, 7) is None
    )
    assert canon.settled_run(TEXT, 0, EMPTY, 3) is None  # nothing settled yet


async def test_qwen3_run_checks_nfc_with_the_segment_before_it(qwen3):
    """Text NFC alone can follow a segment it is not NFC after: no run is offered then."""
    from genlm_bytelm.exact.canonical import Pending
    from genlm_bytelm.exact.canonical.added import AddedPending

    canon = (await ExactByteState.initial(qwen3)).shared.canon

    def after(char):  # settled after ``char`` (Qwen3's filter wraps the BPE one: added tokens)
        return AddedPending(Pending((), b"", canon.byte_vocab, char), run_end=char.encode())

    text = "\u0301 and more words here, and more.".encode()
    assert canon.settled_run(text, 0, after("e"), len(text)) is None  # "é" in NFC
    tokens, end = canon.settled_run(text, 0, after("x"), len(text))  # "x" + U+0301: no form
    assert b"".join(canon.byte_vocab[t] for t in tokens) == text[:-1]  # the "." may go on
    assert end.inner.segment == "e"  # from the last inert character read, "more"'s "e"

"""ExactByteState.prefill / log_likelihood on texts spanning many windows (issue 27, point 1).

The prefill reads a text window by window and keeps only the row entries later steps
need; these tests check that the result is the unwindowed one (to 1e-9) and that the
rows held at once do not grow with the text.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest

from genlm_bytelm import ExactByteState
from genlm_core.testing import MockAsyncLM

PARAGRAPH = (
    "The byte-level model sums over every canonical tokenization of a text. "
    "Numbers like 1234567 and 3.14159, code like `x = f(y) + 2;`, naïve café 中文, "
    "and   runs   of   spaces\n\n\tor tabs all spell tokens differently.\n"
).encode()


def _text(n: int) -> bytes:
    return (PARAGRAPH * (n // len(PARAGRAPH) + 1))[:n]


@pytest.fixture(scope="module")
def llama3(tokenizer_of):
    model = MockAsyncLM(tokenizer_of("llama3"), temperature=0.3)
    yield model
    model.cleanup()


async def _prefill(llm, data, window, **opts):
    """The state after ``data`` with prefill windows of ``window`` bytes."""
    from genlm_bytelm.exact import prefill as exact_prefill

    old = exact_prefill.WINDOW_BYTES, exact_prefill.LOOKAHEAD_BYTES
    exact_prefill.WINDOW_BYTES = window
    exact_prefill.LOOKAHEAD_BYTES = opts.get("lookahead", old[1])
    try:
        state = await ExactByteState.initial(llm, eos_byte_strings=opts.get("eos"))
        return await state.prefill(data)
    finally:
        exact_prefill.WINDOW_BYTES, exact_prefill.LOOKAHEAD_BYTES = old


def _same(a, b):
    got = sorted((tuple(s.lm_state.context), bytes(s.partial), s.weight) for s in a)
    want = sorted((tuple(s.lm_state.context), bytes(s.partial), s.weight) for s in b)
    assert [g[:2] for g in got] == [w[:2] for w in want]
    np.testing.assert_allclose([g[2] for g in got], [w[2] for w in want], rtol=0, atol=1e-9)
    assert a.logZ == pytest.approx(b.logZ, abs=1e-9)
    assert math.isfinite(a.logZ)


@pytest.mark.parametrize("window,lookahead", [(16, 0), (64, 64), (200, 256)])
async def test_windows_give_the_unwindowed_result_gpt2(llm, eos, window, lookahead):
    data = _text(1500)  # many windows, texts with spaces, digits, UTF-8
    whole = await _prefill(llm, data, 10**9, eos=eos)
    windowed = await _prefill(llm, data, window, eos=eos, lookahead=lookahead)
    _same(windowed, whole)
    np.testing.assert_allclose(
        (await windowed.logp_next()).ps, (await whole.logp_next()).ps, atol=1e-9
    )


async def test_windows_give_the_unwindowed_result_llama3(llama3):
    data = _text(3000)
    whole = await _prefill(llama3, data, 10**9)
    windowed = await _prefill(llama3, data, 128)
    _same(windowed, whole)


async def test_windows_equal_reading_byte_by_byte(llm, eos):
    data = _text(300)
    state = await ExactByteState.initial(llm, eos_byte_strings=eos)
    slow = state
    for b in data:
        slow = await (slow << b)
    fast = await _prefill(llm, data, 32, eos=eos, lookahead=0)
    assert fast.logZ == pytest.approx(slow.logZ, abs=1e-9)
    assert sorted(str(s) for s in fast) == sorted(str(s) for s in slow)


_GROWTH = """
import asyncio, resource, sys
from genlm_assets import tokenizer_dir
from genlm_bytelm import log_likelihood
from genlm_core.testing import MockAsyncLM
from transformers import AutoTokenizer

llm = MockAsyncLM(AutoTokenizer.from_pretrained(tokenizer_dir("llama3")))  # the defaults
text = sys.stdin.buffer.read()

async def main():
    await log_likelihood(llm, text[:200])  # the filter, trie and tables are built
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    await log_likelihood(llm, text)
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) // 1024
    print(grown, llm.output_cache_info()["entries"])

asyncio.run(main())
"""


def test_memory_does_not_grow_with_the_text(tmp_path):
    """log_likelihood of 8 KB over Llama-3's 128k tokens, at the library's defaults.

    Unwindowed, every row of the text (about 2,200 of 512 KB) was held at once: more
    than 1 GiB. Windowed, a window's rows; and since its rows are read once, the
    prefill keeps them out of the output cache (``cache=False``): before, they filled
    its 256 MiB budget (+300 MiB, evicting rows others would read again); now the
    process grows by ~30 MiB.
    """
    out = subprocess.run(
        [sys.executable, "-c", _GROWTH],
        input=_text(8000),
        capture_output=True,
        timeout=600,
        cwd=tmp_path,  # import genlm_core as this process does, not from the current folder
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        check=True,
    )
    grown_mib, cached = map(int, out.stdout.decode().split()[-2:])
    assert grown_mib < 128, f"the process grew by {grown_mib} MiB reading 8 KB"
    assert cached <= 8, f"the prefill left {cached} rows in the output cache"


async def test_a_windows_nodes_are_freed_without_the_collector(llm, eos, monkeypatch):
    """Each window's plan is freed by reference counting as the next begins.

    A node and its children refer to each other; left linked, every window's nodes
    (and the context lists they hold, 8 bytes a token each) waited for the collector's
    full pass, which a long text outruns: a 1 MB text's process grew by over a GB.
    """
    import gc

    from genlm_bytelm.exact import prefill as exact_prefill

    monkeypatch.setattr(exact_prefill, "WINDOW_BYTES", 32)
    monkeypatch.setattr(exact_prefill, "LOOKAHEAD_BYTES", 32)
    state = await ExactByteState.initial(llm, eos_byte_strings=eos)
    await state.prefill(b"warm up")

    def plan_nodes() -> int:
        return sum(type(o) is exact_prefill.PlanNode for o in gc.get_objects())

    gc.collect()
    gc.disable()
    try:
        before = plan_nodes()
        read = await state.prefill(_text(32 * 40))  # 40 windows
        live = plan_nodes() - before
    finally:
        gc.enable()
    assert math.isfinite(read.logZ)
    assert live <= 100, f"{live} plan nodes of the finished windows still in memory"


async def _unwindowed_log_z(llm, data):
    """Main's prefill, verbatim in substance: the whole plan, every row, then the sums."""
    from whole_text_plan import plan, walk

    from genlm_bytelm.probs import logsumexp

    state = await ExactByteState.initial(llm)
    (start,) = state.states
    roots = plan([(start.lm_state, b"")], data, state.shared.spell)
    nodes = walk(roots)
    contexts = list(dict.fromkeys(tuple(n.lm_state.context) for n in [*roots, *nodes]))
    rows = dict(
        zip(contexts, await llm.batch_next_token_logprobs([list(c) for c in contexts]), strict=True)
    )
    roots[0].logp = start.weight - float(start.mass[start.node])
    for node in nodes:
        node.logp = node.parent.logp + float(rows[tuple(node.parent.lm_state.context)][node.token])
    longest = state.shared.spell.longest
    finals = [(n, data[n.end :]) for n in nodes if len(data) - longest < n.end < len(data)]
    weights = []
    for node, rest in finals:
        advanced = await state._advanced(node.lm_state, node.logp, rest)
        if advanced is not None:
            weights.append(advanced.weight)
    return logsumexp(weights)


async def test_windows_give_mains_unwindowed_value(llama3):
    data = _text(2500)
    expected = await _unwindowed_log_z(llama3, data)
    got = await _prefill(llama3, data, 100)
    assert got.logZ == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("window,lookahead", [(12, 0), (40, 0), (40, 256)])
async def test_short_windows_keep_the_candidates_that_start_a_window(window, lookahead):
    """SmolLM2's tokenizer has 81-byte tokens: a window's first contexts can end the text."""
    from transformers import AutoTokenizer

    from genlm_assets import model_dir

    text = b"The history of the city dates back to the Roman period, when a small settlement grew."
    model = MockAsyncLM(AutoTokenizer.from_pretrained(str(model_dir("smollm2-135m-instruct"))))
    try:
        whole = await _prefill(model, text, 10**9)
        windowed = await _prefill(model, text, window, lookahead=lookahead)
        _same(windowed, whole)
    finally:
        model.cleanup()


async def test_calls_split_by_their_budgets_give_the_same_result(llm, eos, monkeypatch):
    """Prefix calls and batches cut to a few rows or token ids each: same states."""
    from genlm_bytelm.exact import prefill as exact_prefill

    data = _text(1200)
    whole = await _prefill(llm, data, 10**9, eos=eos)
    row_bytes = 4 * len(llm.byte_vocab)
    for rows, ids in [(1, 10**9), (3, 10**9), (10**6, 50)]:
        monkeypatch.setattr(exact_prefill, "CALL_ROW_BYTES", rows * row_bytes)
        monkeypatch.setattr(exact_prefill, "CALL_TOKEN_IDS", ids)
        _same(await _prefill(llm, data, 200, eos=eos), whole)

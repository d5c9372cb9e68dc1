"""The byte states never hold the event loop (issue 27, point 2).

A heartbeat coroutine ticks every 10 ms while a state is built or reads a byte; the
longest gap between its ticks is the longest stall of the loop. Every case uses a new
model over Llama-3's tokenizer (128k tokens), so that the shared filter and tries are
really built. The bar is the issue's, 100 ms; on a loaded machine a scheduling hiccup
can make one gap long, so a case is tried up to three times (a stall of the library
shows every time).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from genlm_bytelm import BeamParams, ByteBeamState, ExactByteState
from genlm_bytelm.exact import trie_state as exact_state
from genlm_core.testing import MockAsyncLM

BAR = 0.100
TRIES = 3


class Heartbeat:
    """Ticks every 10 ms on the running loop; ``longest``: the longest gap seen."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._task: asyncio.Task | None = None

    async def _tick(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            self.longest = max(self.longest, now - last)
            last = now

    async def __aenter__(self) -> Heartbeat:
        self._task = asyncio.create_task(self._tick())
        await asyncio.sleep(0.02)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.sleep(0.02)
        self._task.cancel()


async def _longest_stall(prepare, case) -> float:
    """The shortest of up to ``TRIES`` measurements of ``await case(prepare())``."""
    best = float("inf")
    for _ in range(TRIES):
        arg = prepare()
        async with Heartbeat() as beat:
            await case(arg)
        best = min(best, beat.longest)
        if best < BAR:
            break
    return best


@pytest.fixture
def fresh_llm(tokenizer_of):
    """``fresh_llm()``: a new mock over Llama-3's tokenizer (nothing shared built yet)."""
    made = []

    def make():
        made.append(MockAsyncLM(tokenizer_of("llama3")))
        return made[-1]

    yield make
    for model in made:
        model.cleanup()


async def test_exact_initial_builds_its_trie_tables_and_first_mask_off_the_loop(fresh_llm):
    """The filter built (its own stall: below), the rest of initial() runs the loop on."""

    def prepare():
        llm = fresh_llm()
        exact_state.shared_filter(llm)  # built outside the measurement
        return llm

    stall = await _longest_stall(prepare, ExactByteState.initial)
    assert stall < BAR, f"ExactByteState.initial held the event loop {stall * 1000:.0f} ms"


async def test_exact_initial_whole_build_keeps_the_loop_running(fresh_llm):
    """Filter, tries and first mask, all built: 0.4-0.7 s stalls on 14983da.

    Reading tokenizer.json (``to_str`` and ``json.loads``), the merges-only Rust BPE and
    ``np.unique(axis=0)`` each held the GIL for 0.15-0.6 s in the build thread; so did
    the collector's full passes over torch's, transformers' and the tokenizer's objects
    (0.15-0.35 s) until the builds froze the heap (``runtime._heap.freeze_heap``): the
    program need not.
    """
    stall = await _longest_stall(fresh_llm, ExactByteState.initial)
    assert stall < BAR, f"ExactByteState.initial held the event loop {stall * 1000:.0f} ms"


async def test_reading_bytes_keeps_the_loop_running(fresh_llm):
    """New contexts' first masks (the filter's tables for them) are computed off the loop."""

    async def case():
        llm = fresh_llm()
        exact_state.shared_filter(llm)
        state = await ExactByteState.initial(llm)
        async with Heartbeat() as beat:
            for b in b"The quick":
                state = await (state << b)
        case.stall = min(getattr(case, "stall", float("inf")), beat.longest)

    for _ in range(TRIES):
        await case()
        if case.stall < BAR:
            break
    assert case.stall < BAR, f"reading a byte held the event loop {case.stall * 1000:.0f} ms"


async def test_beam_initial_builds_its_trie_off_the_loop(fresh_llm):
    async def case(llm):
        await ByteBeamState.initial(llm, BeamParams(K=4))

    stall = await _longest_stall(fresh_llm, case)
    assert stall < BAR, f"ByteBeamState.initial held the event loop {stall * 1000:.0f} ms"


async def test_concurrent_initials_build_once_and_share(fresh_llm, monkeypatch):
    """Two initial() calls at once: one filter and one trie build, the same objects."""
    builds = []
    real = exact_state.canonical_filter  # the family's filter (byte-level BPE here)

    def counted(*args, **kwargs):
        builds.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(exact_state, "canonical_filter", counted)
    llm = fresh_llm()
    a, b = await asyncio.gather(ExactByteState.initial(llm), ExactByteState.initial(llm))
    assert len(builds) == 1
    assert a.shared.canon is b.shared.canon is exact_state.shared_filter(llm)
    assert a.shared.trie is b.shared.trie
    beams = await asyncio.gather(*(ByteBeamState.initial(llm, BeamParams(K=2)) for _ in range(3)))
    assert len({id(beam.states[0].trie) for beam in beams}) == 1


async def test_builds_freeze_the_heap_and_a_cleaned_up_model_is_collected():
    """A full collection over torch's, transformers' and a tokenizer's objects pauses every
    thread 0.15-0.35 s; the builds freeze what exists, so the collections of later calls
    scan only what they made. ``cleanup()`` thaws it: a model is a cycle, and frozen it
    would never be collected. A heap the program froze first is left to the program.
    """
    import gc
    import weakref

    from genlm_core.runtime import _heap as heap
    from genlm_core.testing import ByteTokenizer

    heap.thaw_heap()  # what earlier tests left frozen
    if gc.get_freeze_count():
        pytest.skip("the heap was frozen by someone else")

    async def build():
        llm = MockAsyncLM(ByteTokenizer())
        await ByteBeamState.initial(llm, BeamParams(K=2))
        return llm

    llm = await build()
    assert gc.get_freeze_count() > 0
    model = weakref.ref(llm)
    llm.cleanup()
    del llm
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert model() is None
    gc.freeze()  # the program's own
    frozen = gc.get_freeze_count()
    try:
        llm = await build()
        assert gc.get_freeze_count() <= frozen  # not frozen again (frozen objects may die)
        llm.cleanup()
        assert 0 < gc.get_freeze_count() <= frozen  # nor thawed
    finally:
        gc.unfreeze()

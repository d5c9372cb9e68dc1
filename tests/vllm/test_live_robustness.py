"""Live contexts as programs use them: cleanup mid-decode, event loops closed by hand,
contexts near ``max_model_len``, and the event loop beside a live decode.

Rows are checked against genlm-hf on the same weights (1e-3), as in test_live_contexts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time

import pytest
from processes import engine_processes
from session_requires import require

require("vllm", reason="vLLM is not installed (nox -s vllm installs it)")

import psutil  # noqa: E402 - a vLLM dependency
import torch  # noqa: E402

from genlm_core.errors import InvalidTokenIdsError, ModelClosedError  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"
)

ATOL = 1e-3
#: conftest.ENGINE_OPTS without LoRA (that module is not importable by name here).
ENGINE_OPTS = {
    "dtype": "float32",
    "max_model_len": 512,
    "max_num_seqs": 4,
    "enforce_eager": True,
    "seed": 0,
}
#: Seconds any awaited step here may take before the test calls it a hang.
HANG_S = 60


def max_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def next_token(ctx: list[int], step: int) -> int:
    return 3 + (ctx[-1] * 7 + step * 13) % 29000


async def wait_until(condition, timeout: float = HANG_S) -> None:
    """Poll ``condition()`` until true; fail after ``timeout`` seconds (not hang)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"still false after {timeout} s: {condition}"
        await asyncio.sleep(0.01)


def start_engine(vllm, path: str):
    """An engine of this test's own (it is shut down); the processes it started."""
    before = engine_processes()
    llm = vllm.LLM(model=path, max_logprobs=-1, enable_prefix_caching=True, **ENGINE_OPTS)
    started = engine_processes() - before
    assert started, "vLLM started no engine process"
    return llm, started


# -- cleanup while contexts are live and callers wait ------------------------------------


async def decode(lm, ctx: list[int], steps: int) -> list[torch.Tensor]:
    rows = []
    for step in range(steps):
        rows.append(await lm.next_token_logprobs(ctx))
        ctx = [*ctx, next_token(ctx, step)]
    return rows


async def decode_all(lm, contexts: list[list[int]], steps: int) -> None:
    await asyncio.wait_for(asyncio.gather(*(decode(lm, c, steps) for c in contexts)), HANG_S)


@pytest.mark.parametrize(
    "where",
    # each case starts an engine of its own (~45 s here): the loop's case nightly
    ["thread", pytest.param("event_loop", marks=pytest.mark.thorough)],
)
async def test_cleanup_mid_decode_fails_every_waiting_caller(model_paths, where):
    """8 particles decode on an owned engine; cleanup() comes from a thread or the loop."""
    import vllm

    from genlm_vllm.lm import AsyncVirtualLM

    llm, started = start_engine(vllm, model_paths("tiny"))
    lm = AsyncVirtualLM(llm, owns_engine=True, cache_size=0)
    try:
        runner = lm._live
        tasks = [
            asyncio.create_task(decode(lm, [1, 100 + i, 200 + i], steps=1000)) for i in range(8)
        ]
        await wait_until(lambda: runner.extended >= 16)  # rounds of extensions: contexts live
        if where == "thread":
            await asyncio.wait_for(asyncio.to_thread(lm.cleanup), HANG_S)
        else:
            lm.cleanup()  # blocks the loop until the batch in flight is done
        outcomes = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), HANG_S)
        assert all(isinstance(o, ModelClosedError) for o in outcomes), outcomes
        assert lm.closed and lm.llm is None
        assert not (engine_processes() & started), "the engine process survived cleanup()"
        assert not runner.capture._watched, "requests still watched after the engine stopped"
        with pytest.raises(ModelClosedError):
            await lm.next_token_logprobs([1, 5])
    finally:
        lm.cleanup()  # idempotent: a failed assertion above leaves no engine running


async def test_cleanup_after_the_engine_process_died(model_paths):
    """The engine core killed (SIGKILL) while contexts are live: cleanup() neither hangs
    nor raises, and nothing of the engine is left."""
    import vllm

    from genlm_vllm.lm import AsyncVirtualLM

    llm, started = start_engine(vllm, model_paths("tiny"))
    lm = AsyncVirtualLM(llm, owns_engine=True, cache_size=0)
    try:
        runner = lm._live
        await decode_all(lm, [[1, 40 + i, 50 + i] for i in range(4)], steps=3)
        assert len(runner.table) == 4
        for pid in started:
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(pid).send_signal(signal.SIGKILL)
        client = llm.llm_engine.engine_core
        await wait_until(lambda: client.resources.engine_dead)  # vLLM's monitor saw it
        await asyncio.wait_for(asyncio.to_thread(lm.cleanup), HANG_S)
        assert lm.closed and lm.llm is None
        assert len(runner.table) == 0 and not runner.capture._watched
        await wait_until(lambda: not (engine_processes() & started))
        with pytest.raises(ModelClosedError):
            await lm.next_token_logprobs([1, 5])
    finally:
        lm.cleanup()


async def test_cleanup_goes_on_when_releasing_the_live_contexts_fails(engines, monkeypatch, caplog):
    """A release that raises is logged; the rest of cleanup() still runs."""
    engine = engines("tiny")
    lm = engine.lm(cache_size=0)
    await lm.release_all()
    await lm.batch_next_token_logprobs([[1, 80 + i, 90 + i] for i in range(4)])
    runner = lm._live
    real_release = runner.release

    def broken_release(lora_ids=None):
        raise RuntimeError("release broke")

    monkeypatch.setattr(runner, "release", broken_release)
    try:
        with caplog.at_level(logging.WARNING, logger="genlm_vllm.lm"):
            lm.cleanup()
        assert "live contexts could not be released (RuntimeError: release broke)" in caplog.text
        assert lm.closed and lm.llm is None  # EngineLM._release ran: the engine dropped
        with pytest.raises(ModelClosedError):
            await lm.next_token_logprobs([1, 5])
    finally:
        monkeypatch.undo()
        real_release()  # the shared engine's slots back for the next tests
    assert len(runner.table) == 0


async def test_cleanup_of_a_wrapper_releases_its_live_contexts(engines, hf_reference):
    """A wrapper over a shared engine: its cleanup leaves no parked request holding slots."""
    engine, hf = engines("tiny"), hf_reference("tiny")
    lm = engine.lm(cache_size=0)
    await lm.release_all()
    contexts = [[1, 60 + i, 70 + i] for i in range(4)]  # the engine's 4 slots
    await lm.batch_next_token_logprobs(contexts)
    runner = lm._live
    assert len(runner.table) == 4
    lm.cleanup()
    assert len(runner.table) == 0 and not runner.capture._watched
    # vLLM's own API on the same engine gets every slot back
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    outs = await asyncio.wait_for(
        asyncio.to_thread(
            engine.llm.generate,
            [TokensPrompt(prompt_token_ids=c) for c in contexts],
            SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True),
            use_tqdm=False,
        ),
        HANG_S,
    )
    assert [len(o.outputs[0].token_ids) for o in outs] == [2] * 4
    again = engine.lm(cache_size=0)  # a later wrapper computes exact rows
    try:
        rows = await again.batch_next_token_logprobs([[*c, 9] for c in contexts])
        ref = await hf.batch_next_token_logprobs([[*c, 9] for c in contexts])
        assert max_err(rows, ref) < ATOL
    finally:
        again.cleanup()


# -- event loops closed by hand ----------------------------------------------------------


def test_a_second_loop_after_one_closed_without_asyncio_run(live, hf_reference):
    lm, hf = live, hf_reference("tiny")
    contexts = [[1, 300 + i, 310 + i, 320 + i] for i in range(6)]

    async def rows_of(ctxs):
        return await asyncio.wait_for(lm.batch_next_token_logprobs(ctxs), HANG_S)

    loop = asyncio.new_event_loop()
    try:
        first = loop.run_until_complete(rows_of(contexts))
        # A call left pending on the loop that closes: queued and handed to the worker
        # thread (a few loop passes), then its loop is gone; it may still be computed,
        # with no one to take its row.
        pending = loop.create_task(lm.next_token_logprobs([*contexts[0], 11]))
        for _ in range(3):
            loop.run_until_complete(asyncio.sleep(0))
        del pending
    finally:
        loop.close()
    later = [[*c, 11] for c in contexts]
    loop = asyncio.new_event_loop()
    try:
        second = loop.run_until_complete(rows_of(later))
        third = loop.run_until_complete(rows_of([[*c, 12] for c in later]))
    finally:
        loop.close()
    ref = asyncio.run(hf.batch_next_token_logprobs([*contexts, *later, *[[*c, 12] for c in later]]))
    assert max_err(torch.cat([first, second, third]), ref) < ATOL
    assert lm._live.extended > 0


# -- a context near max_model_len, extended token by token ------------------------------


def rss_mib() -> float:
    """Resident memory of this process and its engine process, MiB."""
    procs = [psutil.Process(), *psutil.Process().children(recursive=True)]
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total / 2**20


async def extend_to_the_end(lm, hf, start: int, check_every: int) -> list[tuple[int, float]]:
    """Extend a ``start``-token context to max_model_len - 1; (length, RSS MiB) per 16."""
    runner = lm._live
    cache = lm.llm.llm_engine.vllm_config.cache_config
    ctx = [1, *(3 + (i * 7919) % 29000 for i in range(start - 1))]
    extended = runner.extended
    memory = []
    step = 0
    while True:
        row = await lm.next_token_logprobs(ctx)
        if len(ctx) % check_every == 0 or len(ctx) == lm.max_model_len - 1:
            assert max_err(row, await hf.next_token_logprobs(ctx)) < ATOL, len(ctx)
        assert runner.table.held_blocks() <= runner.table.blocks <= cache.num_gpu_blocks
        if len(ctx) % 16 == 0:
            memory.append((len(ctx), rss_mib()))
        if len(ctx) == lm.max_model_len - 1:
            break
        ctx = [*ctx, next_token(ctx, step)]
        step += 1
    assert runner.extended - extended == lm.max_model_len - 1 - start
    with pytest.raises(InvalidTokenIdsError, match="max_model_len"):
        await lm.next_token_logprobs([*ctx, 5])
    return memory


async def test_a_context_extended_to_max_model_len(live, hf_reference):
    memory = await extend_to_the_end(live, hf_reference("tiny"), start=480, check_every=8)
    assert memory
    print("length, RSS MiB:", memory)


@pytest.mark.thorough
async def test_a_context_extended_from_short_to_max_model_len_keeps_memory_flat(live, hf_reference):
    memory = await extend_to_the_end(live, hf_reference("tiny"), start=16, check_every=32)
    print("length, RSS MiB:", memory)
    settled = [mib for length, mib in memory if length >= 128]
    assert max(settled) - min(settled) < 64, memory  # no growth with the context's length


# -- the event loop beside a live decode -------------------------------------------------


#: The longest event-loop stall allowed (the bound of tests/core/test_lifecycle.py).
STALL_BOUND = 0.1
#: Tries of a stall measurement: on a loaded machine a scheduling hiccup can make one gap
#: long once; a stall of the library shows every time.
TRIES = 3


async def test_event_loop_keeps_ticking_beside_a_live_decode(live):
    """Engine steps run in the batcher's thread: a ticking coroutine is never held long."""
    lm = live

    async def longest_gap(first: int) -> float:
        gaps: list[float] = []
        done = threading.Event()

        async def tick():
            last = time.perf_counter()
            while not done.is_set():
                await asyncio.sleep(0.001)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        ticker = asyncio.create_task(tick())
        started = time.perf_counter()
        contexts = [[1, first + i, first + 10 + i] for i in range(4)]
        await decode_all(lm, contexts, steps=30)
        elapsed = time.perf_counter() - started
        done.set()
        await ticker
        gaps.sort()
        print(
            f"decode {elapsed:.2f} s, {len(gaps)} ticks, longest gap {gaps[-1] * 1e3:.1f} ms, "
            f"median {gaps[len(gaps) // 2] * 1e3:.2f} ms"
        )
        assert len(gaps) > 30, "the ticker hardly ran while the contexts decoded"
        return gaps[-1]

    longest = float("inf")
    for attempt in range(TRIES):
        longest = min(longest, await longest_gap(500 + 100 * attempt))
        if longest < STALL_BOUND:
            break
    assert longest < STALL_BOUND, f"the event loop stalled {longest * 1e3:.0f} ms"

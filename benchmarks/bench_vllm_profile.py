"""Where a live genlm-vllm call's time goes (``bench_vllm.py --profile``).

A recorded SIS request stream is replayed (the same requests each time) through the
live path, timing: the engine core's iterations (vLLM's ``elapsed_ms``: scheduling
aside, the forward and the sampler, which for ``logprobs=-1`` log-softmaxes and ranks
the whole vocabulary per row), the client's ``LLMEngine.step`` beyond that (waiting for
and receiving the outputs from the engine-core process: the rows' transfer), the rest
of ``compute_batch`` (our Python: building requests, scattering rows), and the rest of
the call (the batcher, asyncio, the SIS client). A second replay asks for no log-probs
at all (``logprobs=None``: rows are then not checked, only timed), so the difference
is what vLLM's log-prob path costs in the core and in the transfer.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any


def profile(lm: Any, prompt: list[int], tokens: int, reset: Any, particles: int = 16) -> None:
    import torch
    from bench_hf import replay, sis

    runner = lm._live
    capture = runner.capture
    steps: list[list[list[int]]] = []
    reset()
    asyncio.run(sis(lm, prompt, particles, tokens, 7, record=steps, sampler="inverse-cdf"))
    engine = runner.engine
    real_step, real_batch = engine.step, lm.compute_batch
    clock = {"step": 0.0, "batch": 0.0}

    def step() -> Any:
        t = time.perf_counter()
        try:
            return real_step()
        finally:
            clock["step"] += time.perf_counter() - t

    def compute_batch(requests: Any) -> Any:
        t = time.perf_counter()
        try:
            return real_batch(requests)
        finally:
            clock["batch"] += time.perf_counter() - t

    def measure(label: str) -> dict[str, float]:
        reset()
        clock.update(step=0.0, batch=0.0)
        core = capture.core_ms
        start = time.perf_counter()
        calls = asyncio.run(replay(lm, steps))
        total = time.perf_counter() - start
        core_s = (capture.core_ms - core) / 1e3
        parts = {
            "engine core (forward + sampler)": core_s,
            "step beyond the core (transfer out)": clock["step"] - core_s,
            "our Python in compute_batch": clock["batch"] - clock["step"],
            "batcher, asyncio, client": total - clock["batch"],
        }
        print(f"  {label}: {calls} calls, {1e3 * total / calls:.2f} ms per call")
        for name, sec in parts.items():
            print(f"    {name:38s} {1e3 * sec / calls:7.3f} ms/call ({100 * sec / total:4.1f}%)")
        return parts

    engine.step, lm.compute_batch = step, compute_batch
    try:
        print(f"where a live call's time goes (replayed SIS stream, {particles} particles):")
        with_rows = measure("logprobs=-1 (the rows)")
        params, real_row = runner._params, runner._row
        dummy = torch.zeros(runner.width)
        runner._params = params.clone()
        runner._params.logprobs = None

        def no_row(rid: str) -> Any:
            capture.take(rid, runner.width)
            return dummy

        runner._row = no_row
        try:
            without = measure("logprobs=None (forward only, rows not computed)")
        finally:
            runner._params, runner._row = params, real_row
        for name in ("engine core (forward + sampler)", "step beyond the core (transfer out)"):
            extra = with_rows[name] - without[name]
            print(f"  the log-prob rows' share of {name}: {extra:.2f} s")
    finally:
        engine.step, lm.compute_batch = real_step, real_batch

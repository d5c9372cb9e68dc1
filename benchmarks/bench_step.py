"""Host work per step: a sampler's step against a bare batched forward (issue 41).

When the forward is cheap the host sets the pace, as it does on a GPU. A random-weight
two-layer Llama (hidden 64) over SmolLM2's real tokenizer and vocabulary (49,152), a
16-token prompt, P particles each extending its own context by one random token a step
(no two particles share more than the prompt), P = 32 and 256:

* ``bare``: the floor, the same rows with nothing around them: one forward of all P
  rows a step over one ``DynamicCache``, then ``log_softmax``.
* ``genlm-hf batched``: ``await lm.batch_next_token_logprobs(contexts)``.
* ``genlm-hf per particle``: one coroutine per particle, ``next_token_logprobs``.
* ``genlm-backend 0.3.1``, both clients, at its defaults (batch_size 20, timeout 20 ms).

Each client (and the bare loop) first runs the same steps untimed, then its caches are
cleared and the steps run again, timed from the prompt's prefill on (not timed): the
steady state of a long run, where memory freed by earlier steps is reused (a first pass
also pays first-touch page faults for the rows it keeps, about 100 us a row here, as
the bare loop pays them for its fresh outputs on every step). A step's time is the
median over the steps. Printed per row: ms a step, the ratio to ``bare``, the
forward's own ms a step (timed around the model's ``forward``, in whatever thread runs
it), the rest per row: (step - forward) / P, in microseconds: the host's work
(the bare loop's is its ``log_softmax`` and the input tensor); the event loop's longest
stall in a step (how late a 1 ms timer fired; what every other coroutine of the program
waits, e.g. a trie or another model); and for genlm-hf the
same step by stage (see ``print_stages``). Issue 41's bar:
genlm-hf at most 1.15x bare at both P, with both clients. The last step's rows are
checked against the bare loop's (the clients must compute the same thing).

``zero-cost model``: each client over a model that costs nothing (it hands out rows
made in advance, distinct for each particle, as any backend whose callers own their
rows must): the client's own work a step. Part of it is a floor for every backend:
the per-particle client's ``torch.stack`` of its P rows into a new tensor needs every
row of the step, so no computation overlaps it; the last line prints bare plus that.

``--profile`` adds where genlm-hf's host time goes: cProfile of its worker thread
(the event loop's thread only waits there), top functions by own time.

Run: ``python benchmarks/bench_step.py`` (``--quick``: fewer steps, no reference at
P = 256; ``--particles 32``: one size).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import os
import pstats
import statistics
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from _machine import cpu_line  # noqa: E402
from bench_hf import asset, load  # noqa: E402

warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' past_key_values

PROMPT_TOKENS = 16
BAR = 1.15
PROMPT = (
    "The lighthouse keeper counted the ships that passed each night, writing their names "
    "in a ledger that had belonged to his grandfather."
)


def tiny_model(folder: Path) -> None:
    """Write the asset cache's random-weight two-layer Llama over SmolLM2's tokenizer."""
    from genlm_assets._convert.lm import save_tiny_lm

    save_tiny_lm("llama", Path(asset("smollm2-135m-instruct")), folder)


#: genlm-hf's steps in its worker thread: (the model's method, the stage it times).
#: Wrapped on the loaded model, so a renamed method fails here, loudly.
HF_STAGES = (
    ("compute_batch", "backend"),
    ("forward_input", "lookup"),
    ("_forward", "gather+forward"),
    ("_log_softmax", "log-softmax"),
    ("_store_kv", "store K/V"),
)


class Clocks:
    """Seconds spent in named callables, wrapped in place, from any thread."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def wrap(self, owner: Any, attr: str, stage: str) -> None:
        inner = getattr(owner, attr)
        self.seconds[stage] = 0.0

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.seconds[stage] += time.perf_counter() - start

        setattr(owner, attr, timed)

    def take(self) -> dict[str, float]:
        """The seconds so far, by stage; then zero."""
        out = dict(self.seconds)
        self.seconds = dict.fromkeys(out, 0.0)
        return out


def clocks_on(lm: Any) -> Clocks:
    """Clocks around ``lm``'s forward, and genlm-hf's stages if it is ours."""
    clocks = Clocks()
    clocks.wrap(lm.model, "forward", "forward")
    if type(lm).__module__.startswith("genlm_hf"):
        for attr, stage in HF_STAGES:
            clocks.wrap(lm, attr, stage)
    return clocks


def workload(vocab: int, prompt: list[int], particles: int, steps: int) -> list[list[list[int]]]:
    """Per step, every particle's context: the prompt and its own random tokens so far."""
    gen = torch.Generator().manual_seed(particles)
    tokens = torch.randint(vocab, (steps, particles), generator=gen).tolist()
    return [[prompt + [tokens[s][i] for s in range(t + 1)] for i in range(particles)]
            for t in range(steps)]  # fmt: skip


class ZeroCostModel:
    """Hands out rows made in advance (distinct per particle), at no cost: the client alone.

    Not bench_hf's ``ZeroCostLM``, which hands every caller one row: here the client's
    stack reads P different rows, as it does over a real backend.
    """

    def __init__(self, particles: int, vocab: int) -> None:
        gen = torch.Generator().manual_seed(particles)
        self._rows = torch.log_softmax(torch.randn(particles, vocab, generator=gen), dim=-1)
        self._each = list(self._rows)
        self._next = 0

    async def next_token_logprobs(self, token_ids: list[int]) -> torch.Tensor:
        row = self._each[self._next]
        self._next = (self._next + 1) % len(self._each)
        return row

    async def batch_next_token_logprobs(self, batch: list[list[int]]) -> torch.Tensor:
        return self._rows


def bare_steps(
    model: Any, contexts: list[list[list[int]]]
) -> tuple[list[float], list[float], torch.Tensor]:
    """The floor: per step (seconds, {stage: seconds}), and the last step's rows."""
    from transformers import DynamicCache

    particles = len(contexts[0])
    prompt = contexts[0][0][:-1]
    clocks = Clocks()
    clocks.wrap(model, "forward", "forward")
    times, stages = [], []
    with torch.inference_mode():
        past = DynamicCache()
        model(torch.tensor([prompt] * particles), past_key_values=past, use_cache=True)
        for step in contexts:
            clocks.take()
            start = time.perf_counter()
            ids = torch.tensor([[ctx[-1]] for ctx in step])
            out = model(ids, past_key_values=past, use_cache=True)
            rows = torch.log_softmax(out.logits[:, -1].float(), dim=-1)
            times.append(time.perf_counter() - start)
            stages.append(clocks.take())
    return times, stages, rows


class LoopStalls:
    """The event loop's longest stall: how late a 1 ms timer fires, at most (seconds)."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(0.001)
            self.longest = max(self.longest, time.perf_counter() - start - 0.001)

    async def __aenter__(self) -> LoopStalls:
        self._task = asyncio.ensure_future(self._tick())
        await asyncio.sleep(0)  # ticking
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        await asyncio.sleep(0.002)  # the tick due during the last stall sees it
        self._task.cancel()


async def client_steps(
    lm: Any, contexts: list[list[list[int]]], batched: bool, clocks: Clocks
) -> tuple[list[float], list[dict[str, float]], torch.Tensor]:
    """Per step (seconds, {stage: seconds}) of one client, and the last step's rows.

    Each step's stages include ``stall``: the event loop's longest stall in it, and
    ``client stack``: the per-particle client's own stack of its rows (0 if batched).
    """
    await lm.next_token_logprobs(contexts[0][0][:-1])  # the prompt's prefill, not timed
    times, stages = [], []
    for step in contexts:
        clocks.take()
        start = time.perf_counter()
        async with LoopStalls() as stalls:
            if batched:
                rows = await lm.batch_next_token_logprobs(step)
            else:
                outs = await asyncio.gather(*(lm.next_token_logprobs(c) for c in step))
            took = time.perf_counter() - start
        stack = 0.0
        if not batched:  # the client's own stack: timed, but not in the stall measured
            start = time.perf_counter()
            rows = torch.stack(outs)
            stack = time.perf_counter() - start
        times.append(took + stack)
        stages.append({**clocks.take(), "stall": stalls.longest, "client stack": stack})
    return times, stages, rows


def profile_worker(folder: Path, contexts: list[list[list[int]]]) -> None:
    """cProfile of genlm-hf's worker thread (where its host work runs), batched client.

    The profiler starts in the model's worker thread as the thread starts
    (``threading.setprofile``), so the prompt's prefill is in it too.
    """
    worker = cProfile.Profile()

    def start_in_worker(frame: Any, event: str, arg: Any) -> None:
        sys.setprofile(None)
        if threading.current_thread().name.endswith(".worker"):
            worker.enable()

    threading.setprofile(start_in_worker)
    try:
        lm = load("ours", str(folder))
        asyncio.run(client_steps(lm, contexts, True, clocks_on(lm)))
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
    print("  where genlm-hf's worker thread spends its own time (batched client):")
    pstats.Stats(worker).sort_stats("tottime").print_stats(15)
    lm.cleanup()


def print_stages(times: list[float], stages: list[dict[str, float]], particles: int) -> None:
    """genlm-hf's step by stage, microseconds per row (medians over the steps).

    ``around`` is everything outside the backend's ``compute_batch`` (validation, the
    output cache, batching, the hand-offs between the loop and the worker thread, row
    checks, hand-out); ``gather`` is the grouped forward less the model's own forward
    (gathering the rows' pasts into one batch, the output projection's setup).
    """
    parts: dict[str, list[float]] = {}
    for took, s in zip(times, stages, strict=True):
        inner = s["lookup"] + s["gather+forward"] + s["log-softmax"] + s["store K/V"]
        split = {
            "around": took - s["backend"],
            "lookup": s["lookup"],
            "gather": s["gather+forward"] - s["forward"],
            "forward": s["forward"],
            "log-softmax": s["log-softmax"],
            "store K/V": s["store K/V"],
            "rest of compute_batch": s["backend"] - inner,
        }
        for stage, seconds in split.items():
            parts.setdefault(stage, []).append(seconds)
    cells = [f"{k} {statistics.median(v) / particles * 1e6:.0f}" for k, v in parts.items()]
    print(f"{'':<4}us/row: " + ", ".join(cells))


def measure(folder: Path, particles: int, steps: int, with_ref: bool, profile: bool) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    prompt = tokenizer.encode(PROMPT)[:PROMPT_TOKENS]
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    contexts = workload(model.config.vocab_size, prompt, particles, steps)
    print(f"\n== P={particles}: {steps} steps, 16-token prompt, vocabulary {len(tokenizer)} ==")
    print(
        f"{'client':<34} {'ms/step':>9} {'x bare':>7} {'forward ms':>11} {'rest us/row':>12} "
        f"{'loop stall ms':>14}"
    )

    def line(name: str, times: list[float], stages: list[dict[str, float]], floor: float) -> float:
        step, fwd = statistics.median(times), statistics.median(s["forward"] for s in stages)
        host = (step - fwd) / particles * 1e6
        stall = (
            f"{statistics.median(s['stall'] for s in stages) * 1e3:.1f}"
            if "stall" in stages[0]
            else "-"
        )
        cells = (
            f"{step * 1e3:>9.1f} {step / floor:>6.2f}x {fwd * 1e3:>11.1f} {host:>12.1f} {stall:>14}"
        )
        print(f"{name:<34} {cells}")
        if "backend" in stages[0]:
            print_stages(times, stages, particles)
        return step

    bare_steps(model, contexts)  # warm-up: the same steps, untimed
    gc.collect()
    times, stages, floor_rows = bare_steps(model, contexts)
    floor = statistics.median(times)
    line("bare (the floor)", times, stages, floor)
    zero = ZeroCostModel(particles, model.config.vocab_size)
    stack = 0.0  # the per-particle client's own stack, as a share of a bare step
    for batched in (True, False):
        name = f"zero-cost model {'batched' if batched else 'per particle'}"
        asyncio.run(client_steps(zero, contexts, batched, Clocks()))  # warm-up, untimed
        times, stages, _ = asyncio.run(client_steps(zero, contexts, batched, Clocks()))
        for s in stages:
            s["forward"] = 0.0
        line(name, times, stages, floor)
        if not batched:
            stack = statistics.median(s["client stack"] for s in stages) / floor
    kinds = [("genlm-hf", "ours")] + ([("genlm-backend 0.3.1", "ref")] if with_ref else [])
    verdicts = []
    for label, kind in kinds:
        lm = load(kind, str(folder))
        clocks = clocks_on(lm)
        for batched in (True, False):
            name = f"{label} {'batched' if batched else 'per particle'}"
            asyncio.run(client_steps(lm, contexts, batched, clocks))  # warm-up, untimed
            lm.clear_cache()  # every step computes again (its memory is kept for reuse)
            gc.collect()
            times, stages, rows = asyncio.run(client_steps(lm, contexts, batched, clocks))
            lm.clear_cache()
            step = line(name, times, stages, floor)
            gap = (rows.float() - floor_rows).abs().max().item()
            if gap > 1e-3:
                raise AssertionError(f"{name}: rows differ from the bare loop's by {gap:.2e}")
            if kind == "ours":
                verdicts.append(f"{name} {step / floor:.2f}x")
        if hasattr(lm, "cleanup"):
            lm.cleanup()
    if profile:
        profile_worker(folder, contexts)
    passed = all(float(v.rsplit(" ", 1)[1][:-1]) <= BAR for v in verdicts)
    print(
        f"bar: genlm-hf at most {BAR}x bare: {', '.join(verdicts)}: {'PASS' if passed else 'FAIL'}"
    )
    print(
        f"  no backend can be under {1 + stack:.2f}x bare per particle here: the client's own "
        f"stack of its rows, after the last one comes, is {stack:.0%} of a bare step"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps; P=256 without 0.3.1")
    parser.add_argument("--particles", type=int, action="append", choices=(32, 256))
    parser.add_argument("--profile", action="store_true", help="cProfile genlm-hf's worker thread")
    args = parser.parse_args()
    load_now = os.getloadavg()[0]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load {load_now:.2f}")
    print(cpu_line())
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        tiny_model(folder)
        for particles in args.particles or (32, 256):
            steps = (6 if args.quick else 12) if particles == 32 else (4 if args.quick else 8)
            with_ref = not (args.quick and particles == 256)
            measure(folder, particles, steps, with_ref, args.profile)
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

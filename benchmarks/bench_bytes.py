"""genlm_bytelm over genlm-hf vs genlm-bytes 0.2.0 over genlm-backend 0.3.1, same run.

SmolLM2-135M-Instruct, fp32, CPU, ``BeamParams(K=4, prune_threshold=0.05, heal=True)``.
Both libraries run over the *same* transformers module (one copy of the weights), each
through its own backend (genlm-hf's ``AsyncTransformer``, genlm-backend's). Tries are
built once per library and excluded, as is each beam's first model call (the BOS
context): the figures are the beam's own work.

Scenarios (bars from issue 13):

* ``prefill``: ``beam.prefill`` of 219 bytes of English. Figure: bytes/s. Bar >= 10x.
* ``greedy``: after prefilling the same text (not timed), ``beam.greedy(b"", 64)``.
  Figures: bytes/s (bar >= 3x) and the share of wall time spent inside the model's
  forward (bar >= 85%): the distance to this machine's floor, one forward per token.
* ``beams``: 8 beams with different prompts (prefilled, not timed) each generating 32
  bytes greedily, all at once with ``asyncio.gather``. Figures: aggregate bytes/s (bar
  >= 3x) and the mean number of rows per forward.
* ``exact`` (issue 20, :mod:`bytes_exact` beside this file): ExactByteState's prefill
  against our K=4 beam (bar >= 1.0x) and genlm-bytes, and its greedy 64 bytes against
  our unpruned K=64 beam (bar >= 5x), the K=4 beam and genlm-bytes, with forwards per
  byte, candidates per step and the share of time in the forward. The K=64 beam's
  untimed prefill of the text takes minutes on a CPU.
* ``memory`` (ours only, in a subprocess): a 5,000-byte prefill, then 10,000 greedy
  steps; resident memory sampled along, beside the bytes the model's caches hold
  (they are budgeted: 256 MiB of keys/values, 32 MiB of log-probs). Bar: what is not
  in those caches stays flat after the prefill (no state keeps a dropped state's
  masses).

Each repeat starts from cold model caches and a fresh garbage collection; the two
libraries alternate, so load from other processes hits both alike. Medians over
``--repeats`` and their ratios are printed, with where the time went (forwards: count,
rows, seconds) and the machine's load average.

Run: ``python benchmarks/bench_bytes.py`` (``--quick``: fewer repeats and bytes;
``--only prefill``...).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore", message="Sparse")  # inside genlm-bytes

import torch  # noqa: E402
from _caller_threads import as_alone  # noqa: E402
from _machine import cpu_line  # noqa: E402
from _row_copies import rows_shared  # noqa: E402

SCENARIOS = ("prefill", "greedy", "beams", "exact", "memory")
MODEL = "smollm2-135m-instruct"
PARAMS = {"K": 4, "prune_threshold": 0.05, "heal": True}
TEXT = (
    b"The history of the city dates back to the Roman period, when a small settlement "
    b"grew up around a bridge over the river. During the Middle Ages it became an important "
    b"market town, and its cathedral was completed in 1250."
)
PROMPTS = [
    b"Montreal is a city where",
    b"The best way to learn a language is",
    b"Once upon a time, in a small village,",
    b"My favorite writer is probably",
    b"The recipe calls for two cups of",
    b"In 1969, astronauts",
    b"The old lighthouse keeper",
    b"Scientists have discovered that",
]
MiB = 1 << 20


class ForwardClock:
    """Times the transformers module's ``forward`` (both libraries call the same one)."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.calls: list[tuple[int, float]] = []  # (rows, seconds)
        original = module.forward

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            out = original(*args, **kwargs)
            ids = kwargs.get("input_ids", args[0] if args else None)
            self.calls.append((int(ids.shape[0]), time.perf_counter() - t0))
            return out

        module.forward = timed

    def reset(self) -> None:
        self.calls.clear()

    def summary(self) -> tuple[int, float, float]:
        """(forwards, mean rows per forward, seconds inside forwards)."""
        n = len(self.calls)
        rows = sum(r for r, _ in self.calls) / n if n else 0.0
        return n, rows, sum(s for _, s in self.calls)


class Library:
    """One side of the race: its LM, its beam module, and beams built on a cached trie."""

    def __init__(self, kind: str, hf_model: Any, tokenizer: Any, shared: bool = False) -> None:
        self.kind = kind
        self.shared = shared  # rows handed out uncopied (before issue 23): times the copies
        if kind == "ref":
            import genlm.bytes as bytes_module
            from genlm.backend.llm.hf import AsyncTransformer

            self.lm = AsyncTransformer(hf_model, tokenizer)
        else:
            import genlm_bytelm as bytes_module
            from genlm_hf.lm import AsyncTransformer

            self.lm = AsyncTransformer(hf_model, tokenizer)
        self.mod = bytes_module
        self.params = bytes_module.BeamParams(**PARAMS)
        self._trie = None

    async def beam(self) -> Any:
        """A fresh initial beam (genlm-bytes' ``initial`` builds a trie each time: not here)."""
        if self.kind == "ours":
            return await self.mod.ByteBeamState.initial(self.lm, self.params)
        if self._trie is None:
            self._trie = self.mod.AsyncTokenByteTrie.from_vocab(
                self.lm.byte_vocab, eos_byte_strings=self.params.eos_byte_strings, device="cpu"
            )
        state = self.mod.LazyTrieState.initial(self.lm, self._trie)
        return self.mod.ByteBeamState([await state.materialize()], self.params)

    def clear(self) -> None:
        self.lm.clear_cache()
        gc.collect()


# -- scenarios --------------------------------------------------------------------------


async def run_prefill(lib: Library, clock: ForwardClock, text: bytes) -> tuple[float, Any]:
    beam = await lib.beam()
    clock.reset()
    t0 = time.perf_counter()
    await beam.prefill(text)
    return time.perf_counter() - t0, clock.summary()


async def run_greedy(lib: Library, clock: ForwardClock, text: bytes, steps: int):
    beam = await (await lib.beam()).prefill(text)
    clock.reset()
    t0 = time.perf_counter()
    out = await beam.greedy(b"", steps)
    return time.perf_counter() - t0, clock.summary(), out


async def run_beams(lib: Library, clock: ForwardClock, steps: int):
    beams = [await (await lib.beam()).prefill(p) for p in PROMPTS]
    clock.reset()
    t0 = time.perf_counter()
    outs = await asyncio.gather(*(b.greedy(b"", steps) for b in beams))
    return time.perf_counter() - t0, clock.summary(), outs


def race(name: str, libs: dict[str, Library], clock: ForwardClock, repeats: int, make: Any):
    """Run ``make(lib)`` for each library, alternating, ``repeats`` times; medians."""
    seconds: dict[str, list[float]] = {k: [] for k in libs}
    stats: dict[str, list[tuple[int, float, float]]] = {k: [] for k in libs}
    outputs: dict[str, Any] = {}
    for r in range(repeats):
        order = list(libs) if r % 2 == 0 else list(reversed(libs))
        for kind in order:
            libs[kind].clear()
            as_alone(libs[kind].lm)
            with rows_shared() if libs[kind].shared else contextlib.nullcontext():
                result = asyncio.run(make(libs[kind]))
            seconds[kind].append(result[0])
            stats[kind].append(result[1])
            outputs[kind] = result[2] if len(result) > 2 else None
            n, rows, fwd = result[1]
            print(
                f"  repeat {r} {name:7s} {kind:4s}: {result[0]:7.3f} s, {n:4d} forwards "
                f"({rows:.1f} rows each, {fwd:6.3f} s inside, {fwd / result[0]:4.0%} of wall)",
                flush=True,
            )
    med = {k: statistics.median(v) for k, v in seconds.items()}
    return med, stats, outputs


def report(label: str, units: float, med: dict[str, float], bar: float) -> float:
    ours, ref = units / med["ours"], units / med["ref"]
    ratio = ours / ref
    print(
        f"  {label}: genlm-bytes {ref:8.1f}/s, genlm_bytelm {ours:8.1f}/s, "
        f"ratio {ratio:.1f}x (bar >= {bar:g}x: {'PASS' if ratio >= bar else 'FAIL'})"
    )
    if "shared" in med:
        shared = units / med["shared"]
        print(
            f"  copies each caller owns: {ours:.1f}/s vs {shared:.1f}/s with shared rows "
            f"(unsafe, before issue 23): {ours / shared:.3f}x"
        )
    return ratio


def median_stat(stats: list[tuple[int, float, float]], i: int) -> float:
    return statistics.median(s[i] for s in stats)


# -- memory -----------------------------------------------------------------------------


def memory_child(prefill_bytes: int, steps: int) -> None:
    """Subprocess body: prefill, then greedy steps; print RSS and cache bytes as JSON lines."""
    import psutil
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import genlm_bytelm as gb
    from genlm_core.testing.assets import model_dir
    from genlm_hf.lm import AsyncTransformer

    path = str(model_dir(MODEL))
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    lm = AsyncTransformer(
        model, AutoTokenizer.from_pretrained(path), kv_cache_bytes=256 * MiB, cache_bytes=32 * MiB
    )
    proc = psutil.Process()

    def point(label: str, done: int) -> None:
        gc.collect()
        info = lm.cache_info()
        outputs = info["outputs"]
        # keys/values held (the pool is reserved whole; its untouched pages are not resident)
        cached = info["kv"].bytes + outputs["bytes"] + outputs["free_row_bytes"]
        rss = proc.memory_info().rss
        print(json.dumps({"at": label, "steps": done, "rss": rss, "cached": cached}))
        sys.stdout.flush()

    async def main() -> None:
        beam = await gb.ByteBeamState.initial(lm, gb.BeamParams(**PARAMS))
        text = (TEXT * (prefill_bytes // len(TEXT) + 1))[:prefill_bytes]
        point("loaded", 0)
        beam = await beam.prefill(text)
        point("prefilled", 0)
        done = 0
        while done < steps:
            chunk = min(steps - done, max(1, steps // 8))
            for _ in range(chunk):
                b = (await beam.logp_next()).argmax()
                if b is None or b == gb.EOS:
                    b = 32  # keep going: a space
                beam = await (beam.prune() << b)
            done += chunk
            point("greedy", done)

    asyncio.run(main())


def memory(prefill_bytes: int, steps: int) -> None:
    print(f"\n== memory: {prefill_bytes}-byte prefill, then {steps} greedy steps, {MODEL} ==")
    cmd = [sys.executable, __file__, "--memory-child", str(prefill_bytes), str(steps)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    points = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    for p in points:
        rest = (p["rss"] - p["cached"]) / MiB
        print(
            f"  {p['at']:9s} {p['steps']:6d} steps: RSS {p['rss'] / MiB:7.1f} MiB, "
            f"in budgeted caches {p['cached'] / MiB:6.1f} MiB, rest {rest:7.1f} MiB"
        )
    rest = [(p["rss"] - p["cached"]) / MiB for p in points if p["at"] != "loaded"]
    growth = max(rest) - rest[0]
    print(
        f"  memory outside the budgeted caches after the prefill: +{growth:.1f} MiB over "
        f"{steps} steps ({time.perf_counter() - t0:.0f} s); bar <= 32 MiB: "
        f"{'PASS' if growth <= 32 else 'FAIL'}"
    )


# -- main --------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short run")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--only", choices=SCENARIOS, action="append")
    parser.add_argument("--memory-child", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        memory_child(*args.memory_child)
        return
    repeats = args.repeats or (1 if args.quick else 3)
    only = args.only or list(SCENARIOS)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, repeats={repeats}, "
        f"load average {os.getloadavg()[0]:.2f}, params {PARAMS}"
    )
    print(cpu_line())
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from genlm_core.testing.assets import model_dir

    path = str(model_dir(MODEL))
    hf_model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    clock = ForwardClock(hf_model)
    libs = {
        "ref": Library("ref", hf_model, tokenizer),
        "ours": Library("ours", hf_model, tokenizer),
        "shared": Library("ours", hf_model, tokenizer, shared=True),
    }
    for lib in libs.values():  # warm-up: tries, thread pools, kernels (excluded)
        asyncio.run(run_prefill(lib, clock, TEXT[:40]))
    results = {}
    if "prefill" in only:
        print(f"\n== prefill: {len(TEXT)} bytes of English, {MODEL} ==")
        med, stats, _ = race(
            "prefill", libs, clock, repeats, lambda lib: run_prefill(lib, clock, TEXT)
        )
        results["prefill"] = report("prefill bytes/s", len(TEXT), med, 10)
    if "greedy" in only:
        steps = 16 if args.quick else 64
        print(f"\n== greedy: {steps} bytes after the {len(TEXT)}-byte text (prefill not timed) ==")
        med, stats, outs = race(
            "greedy", libs, clock, repeats, lambda lib: run_greedy(lib, clock, TEXT, steps)
        )
        results["greedy"] = report("greedy bytes/s", steps, med, 3)
        share = statistics.median(s[2] for s in stats["ours"]) / med["ours"]
        print(
            f"  ours: {median_stat(stats['ours'], 0):.0f} forwards for {steps} bytes "
            f"(genlm-bytes: {median_stat(stats['ref'], 0):.0f}), {share:.0%} of wall time "
            f"inside the model's forward (bar >= 85%: {'PASS' if share >= 0.85 else 'FAIL'})"
        )
        print(f"  same bytes generated: {outs['ours'] == outs['ref']} ({outs['ours'][:40]!r}...)")
    if "beams" in only:
        steps = 8 if args.quick else 32
        print(f"\n== beams: {len(PROMPTS)} beams x {steps} greedy bytes at once ==")
        med, stats, outs = race(
            "beams", libs, clock, repeats, lambda lib: run_beams(lib, clock, steps)
        )
        results["beams"] = report("aggregate bytes/s", len(PROMPTS) * steps, med, 3)
        print(
            f"  mean rows per forward: genlm-bytes {median_stat(stats['ref'], 1):.1f}, ours "
            f"{median_stat(stats['ours'], 1):.1f}; forwards {median_stat(stats['ref'], 0):.0f} "
            f"vs {median_stat(stats['ours'], 0):.0f}; same bytes: {outs['ours'] == outs['ref']}"
        )
    if "exact" in only:
        from bytes_exact import exact_races

        ratios = exact_races(hf_model, tokenizer, clock, repeats, args.quick, TEXT, Library)
        results.update({f"exact {k}": round(v, 2) for k, v in ratios.items()})
    for lib in libs.values():
        lib.lm.cleanup() if hasattr(lib.lm, "cleanup") else None
    if "memory" in only:
        memory(1000 if args.quick else 5000, 500 if args.quick else 10_000)
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}; ratios {results}")


if __name__ == "__main__":
    main()

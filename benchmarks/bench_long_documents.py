"""Exact log-likelihood of long mixed documents, per tokenizer family: memory, stalls, speed.

Issue 39's bars, at the library's default settings, over ``MockAsyncLM`` (a model that
costs almost nothing, so what is measured is the library's own work; it answers a prefix
call in one call, as genlm-hf's forward does) on each family's
real tokenizer: ``log_likelihood`` of a 50 KB document mixing prose, code, numbers, a
Markdown table, HTML and non-Latin text, with a coroutine ticking beside it.

Printed per family: peak RSS growth over the process after ``ExactByteState.initial``
(and a 300-byte warm-up read), the event loop's longest gap, seconds and seconds per KB,
the planning's CPU seconds per KB (the filter's work listing the contexts, in its
thread), and where the time went (the filter's planning, the model, the trie), from the
profiler when ``--profile`` is given. ``--byte-by-byte`` turns off the settled runs
(``exact_prefill.SETTLED_RUNS``), to compare.

Bars: growth at most 512 MiB, longest gap at most 100 ms, at most 0.25 s per KB, for
Llama-2, Qwen3, Gemma 3, Llama-3 and o200k; ``--mb`` adds 1 MB over Llama-3 (bar:
under 300 s). Each family runs in a fresh subprocess so one does not inflate the next.

Run: ``python benchmarks/bench_long_documents.py`` (``--quick``: 10 KB; ``--family
llama3``: one family; ``--kb 100``: another size; ``--profile``: cProfile's top
functions; ``--byte-by-byte``: without settled runs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

FAMILIES = ("llama2", "qwen3", "gemma3", "llama3", "o200k")
BAR_MIB = 512
BAR_GAP_MS = 100
BAR_S_PER_KB = 0.25
BAR_MB_SECONDS = 300

PROSE = (
    "Section {i}. The river town grew around a bridge built in 1{i:03d}; its market drew "
    "traders from the coast, and by the census of 18{k:02d} it counted {j:,} households. "
    "Historians disagree on why: some credit the toll (3.5% of each cart's value), others "
    "the ferry's collapse in the flood of '{k:02d}.\n\n"
)
CODE = (
    "def step_{i}(state: dict[str, float], x: float) -> float:\n"
    '    """Advance the state by one tick ({i} of {j})."""\n'
    "    if x <= 0 or state.get('rate', 1e-3) > {k}:\n"
    "        return state['value'] * 0x{i:04x} + x ** 2 - f(x, y={j})\n"
    "    return sum(v for v in state.values() if v != {k})  # TODO: vectorise\n\n"
)
TABLE = (
    "| year | wheat (t) | barley (t) | price/kg |\n"
    "|------|----------:|-----------:|---------:|\n"
    "| 19{k:02d} | {j:>9,} | {i:>10} | {k}.{i:02d} |\n"
    "| 19{k1:02d} | {j1:>9,} | {i1:>10} | {k1}.{i:02d} |\n\n"
)
HTML = '<div class="row"><a href="/item/{i}">Item {i}</a> <span>{j} in stock</span></div>\n'
WORLD = (
    "Die Brücke über den Fluss wurde {k} Mal erneuert; «ça suffit», dit le maire. "
    "Москва — столица России. 東京は日本の首都で、人口は約{j}人です。 "
    "中文文本也要正确处理。 العربية تُكتب من اليمين إلى اليسار. Ελληνικά: αβγ. 🙂👍\n\n"
)


def document(n: int) -> bytes:
    """``n`` bytes of mixed text (reproducible), starting with a space (Llama-2 reads one)."""
    parts, i, size = [b" "], 0, 1
    while size < n:
        fields = {"i": i, "j": 7919 * i % 100_003, "k": i % 97, "i1": i + 1}
        fields |= {"j1": fields["j"] + 13, "k1": (i + 1) % 97}
        for template in (PROSE, CODE, TABLE, HTML, WORLD):
            part = template.format(**fields).encode()
            parts.append(part)
            size += len(part)
        i += 1
    data = b"".join(parts)[:n]
    while True:  # whole characters only
        try:
            data.decode("utf-8")
            return data
        except UnicodeDecodeError:
            data = data[:-1]


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


class Ticker:
    """A coroutine beside the work, noting the longest gap between its wake-ups."""

    def __init__(self, period: float = 0.002) -> None:
        self.period = period
        self.longest = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(self.period)
            now = time.perf_counter()
            self.longest = max(self.longest, now - last - self.period)
            last = now

    def __enter__(self) -> Ticker:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._task is not None
        self._task.cancel()


def _planning_clock() -> list[float]:
    """CPU seconds the prefill's planning (``_Windows``) spends, summed into the list."""
    from genlm_bytelm.exact import prefill as exact_prefill

    spent = [0.0]
    for name in ("first", "next_window"):
        method = getattr(exact_prefill._Windows, name)

        def timed(self: Any, _method: Any = method) -> Any:
            started = time.thread_time()
            try:
                return _method(self)
            finally:
                spent[0] += time.thread_time() - started

        setattr(exact_prefill._Windows, name, timed)
    return spent


async def run_case(family: str, n_bytes: int, profile: bool, runs: bool = True) -> dict[str, Any]:
    """Subprocess body: one family, measured against the peak after ``initial``."""
    from transformers import AutoTokenizer

    from genlm_bytelm.exact import prefill as exact_prefill

    exact_prefill.SETTLED_RUNS = runs
    planning = _planning_clock()

    from genlm_assets import tokenizer_dir
    from genlm_bytelm import ExactByteState, log_likelihood
    from genlm_core.testing import MockAsyncLM

    llm = MockAsyncLM(AutoTokenizer.from_pretrained(tokenizer_dir(family)))
    text = document(n_bytes)
    state = await ExactByteState.initial(llm)
    await state.prefill(document(300))
    base = peak_mib()
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    planning[0] = 0.0
    started = time.perf_counter()
    with Ticker() as ticker:
        result = await log_likelihood(llm, text)
    seconds = time.perf_counter() - started
    if profiler is not None:
        import io
        import pstats

        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(25)
        print(out.getvalue(), file=sys.stderr)
    llm.cleanup()
    return {
        "family": family,
        "bytes": len(text),
        "seconds": seconds,
        "s_per_kb": seconds / (len(text) / 1000),
        "plan_s_per_kb": planning[0] / (len(text) / 1000),
        "peak_mib": peak_mib() - base,
        "gap_ms": ticker.longest * 1000,
        "bits_per_byte": result.bits_per_byte,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--family", action="append", choices=FAMILIES)
    parser.add_argument("--kb", type=float, default=50.0, help="document size (KB)")
    parser.add_argument("--quick", action="store_true", help="10 KB per family")
    parser.add_argument("--mb", action="store_true", help="also 1 MB over Llama-3")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions")
    parser.add_argument(
        "--byte-by-byte", action="store_true", help="without settled runs (to compare)"
    )
    parser.add_argument("--case", nargs=2, metavar=("FAMILY", "BYTES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        family, n = args.case
        result = run_case(family, int(n), args.profile, not args.byte_by_byte)
        print(json.dumps(asyncio.run(result)))
        return 0
    kb = 10.0 if args.quick else args.kb
    cases = [(f, int(kb * 1000)) for f in args.family or FAMILIES]
    if args.mb:
        cases.append(("llama3", 1_000_000))
    print(f"load before: {os.getloadavg()[0]:.2f}")
    print(
        f"{'family':<8} {'KB':>6} {'peak RSS':>10} {'gap':>8} {'seconds':>9} {'s/KB':>7} "
        f"{'plan s/KB':>9}  bits/B"
    )
    failed = False
    for family, n in cases:
        cmd = [sys.executable, __file__, "--case", family, str(n)]
        if args.profile:
            cmd.append("--profile")
        if args.byte_by_byte:
            cmd.append("--byte-by-byte")
        done = subprocess.run(cmd, capture_output=True, check=False)
        if args.profile:
            print(done.stderr.decode()[-6000:])
        if done.returncode:
            print(f"{family} {n}: failed\n{done.stderr.decode()[-3000:]}")
            failed = True
            continue
        out = json.loads(done.stdout.decode().strip().splitlines()[-1])
        bad = [
            out["peak_mib"] > BAR_MIB and f"RSS over {BAR_MIB} MiB",
            out["gap_ms"] > BAR_GAP_MS and f"gap over {BAR_GAP_MS} ms",
            n < 1_000_000 and out["s_per_kb"] > BAR_S_PER_KB and f"over {BAR_S_PER_KB} s/KB",
            n >= 1_000_000 and out["seconds"] > BAR_MB_SECONDS and f"over {BAR_MB_SECONDS} s",
        ]
        bad = [b for b in bad if b]
        failed |= bool(bad)
        print(
            f"{family:<8} {n / 1000:>6.0f} {out['peak_mib']:>6.0f} MiB {out['gap_ms']:>5.0f} ms "
            f"{out['seconds']:>9.1f} {out['s_per_kb']:>7.3f} {out['plan_s_per_kb']:>9.3f}  "
            f"{out['bits_per_byte']:.4f}" + (f"  ({'; '.join(bad)})" if bad else "")
        )
        sys.stdout.flush()
    print(f"load after: {os.getloadavg()[0]:.2f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

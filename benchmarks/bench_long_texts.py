"""Peak memory of reading long texts: ``log_likelihood`` and the other per-token paths.

Issue 27: memory is bounded by the work in flight, not by the text. Each case runs in
a fresh subprocess (so one size does not inflate the next): the model, filter and
trie are built and a short text read first, then the process's peak RSS
(``getrusage`` maxrss) is taken as the baseline and the case is timed; printed is the
peak RSS growth over that baseline.

Cases (``path model bytes``):

* ``ll mock N``: ``log_likelihood`` with MockAsyncLM over Llama-3's tokenizer (128k
  tokens, default output cache of 256 MiB); where the unwindowed reading fits in
  memory (10 KB), it is run after the measurement and the difference printed
  (bar: 0 within 1e-9);
* ``ll smollm2 N``: the same with SmolLM2-135M-Instruct (genlm-hf, CPU, fp32);
* ``beam mock N``: ``ByteBeamState(K=8, prune_threshold=0, heal=True).prefill`` (read ahead in
  windows of 512 bytes);
* ``prefix mock N``: ``prefix_next_token_logprobs`` along the text's tokenization,
  which returns every row by contract (tokens x vocabulary x 4 bytes: documented,
  not bounded; docs/bytes.md).

Bar: ``ll`` flat within 512 MiB from 10 KB to 1 MB (the spread of the peaks is
checked; each peak is printed; with ``--cache-mib 32``, or ``GENLM_TRIM_HEAP=1`` (the
mock does not trim its heap by default; genlm-hf does on a CPU), each peak is within
512 MiB too). Run: ``python benchmarks/bench_long_texts.py``, ``--quick`` (``ll`` only),
``--full`` (adds 1 MB: ~18 minutes with the mock on a 2-core CPU, and the beam at
100 KB), or one case: ``--case ll mock 10000``; ``--cache-mib`` sets the models' output
cache budget.
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
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

MiB = 2**20
#: The models' output cache budget (their default: 256 MiB), ``--cache-mib``.
CACHE_MIB = int(os.environ.get("BENCH_CACHE_MIB", "256"))
BAR_MIB = 512


PARAGRAPH = (
    "Section {i}. The river town grew around a bridge built in 1{i:03d}; its market drew "
    "traders from the coast, and by the time of the census it counted {j} households.\n"
    "    def step(state, x):  # code too: indentation, symbols, numbers like 3.14159\n"
    "        return state * {i} + x ** 2 - f(x, y={j})\n"
    "Caf\u00e9s, na\u00efve questions and \u4e2d\u6587 text keep the UTF-8 path honest.\n\n"
)


def text_of(n: int) -> bytes:
    """``n`` bytes of English, code and UTF-8: a fixed paragraph, numbered (reproducible)."""
    out, i = [], 0
    while sum(map(len, out)) < n:
        out.append(PARAGRAPH.format(i=i, j=7 * i + 3).encode())
        i += 1
    return b"".join(out)[:n]


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def load(model: str) -> Any:
    if model == "mock":
        from transformers import AutoTokenizer

        from genlm_assets import tokenizer_dir
        from genlm_core.testing import MockAsyncLM

        return MockAsyncLM(
            AutoTokenizer.from_pretrained(tokenizer_dir("llama3")), cache_bytes=CACHE_MIB * MiB
        )
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from genlm_assets import model_dir
    from genlm_hf.lm import AsyncTransformer

    path = str(model_dir("smollm2-135m-instruct"))
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return AsyncTransformer(hf, AutoTokenizer.from_pretrained(path), cache_bytes=CACHE_MIB * MiB)


async def run_case(path: str, model: str, n: int) -> dict[str, Any]:
    """Subprocess body: one case, measured against the peak after the warm-up."""
    from genlm_bytelm import BeamParams, ByteBeamState, log_likelihood
    from genlm_bytelm.exact import prefill as exact_prefill

    llm = load(model)
    text = text_of(n)
    warm = text[:300]
    if path == "ll":
        await log_likelihood(llm, warm)
    elif path == "beam":
        beam = await ByteBeamState.initial(llm, BeamParams(K=8, prune_threshold=0.0, heal=True))
        await beam.prefill(warm)
    else:
        llm.prefix_next_token_logprobs_sync(llm.tokenizer.encode(warm.decode()))
    base = peak_mib()
    started = time.perf_counter()
    out: dict[str, Any] = {"case": f"{path} {model} {n}"}
    if path == "ll":
        result = await log_likelihood(llm, text)
        out["logprob"] = result.logprob
        out["bits_per_byte"] = result.bits_per_byte
    elif path == "beam":
        beam = await ByteBeamState.initial(llm, BeamParams(K=8, prune_threshold=0.0, heal=True))
        out["logprob"] = (await beam.prefill(text)).logZ
    else:
        ids = [llm.tokenizer.bos_token_id, *llm.tokenizer.encode(text.decode(errors="ignore"))]
        rows = await llm.prefix_next_token_logprobs(ids)
        out["rows"] = len(rows)
        del rows
    out["seconds"] = time.perf_counter() - started
    out["peak_mib"] = peak_mib() - base
    if path == "ll" and n <= 10_000:  # the unwindowed reading, after the measurement
        exact_prefill.WINDOW_BYTES = 10**12
        whole = await log_likelihood(llm, text)
        out["unwindowed_diff"] = abs(whole.logprob - out["logprob"])
    return out


CASES_QUICK = [("ll", "mock", 10_000), ("ll", "mock", 100_000), ("ll", "smollm2", 10_000)]
CASES = [*CASES_QUICK, ("beam", "mock", 10_000), ("prefix", "mock", 2_000)]
CASES_FULL = [*CASES, ("ll", "mock", 1_000_000), ("beam", "mock", 100_000)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="log_likelihood, 10 KB and 100 KB")
    parser.add_argument("--full", action="store_true", help="also 1 MB (hours on the mock)")
    parser.add_argument("--case", nargs=3, metavar=("PATH", "MODEL", "BYTES"))
    parser.add_argument("--cache-mib", type=int, help="the models' output cache budget")
    parser.add_argument("--timeout", type=float, default=3 * 3600, help="seconds per case")
    args = parser.parse_args()
    if args.cache_mib is not None:
        global CACHE_MIB
        CACHE_MIB = args.cache_mib  # this process (--case) and the cases' subprocesses
        os.environ["BENCH_CACHE_MIB"] = str(args.cache_mib)
    if args.case:
        path, model, n = args.case
        print(json.dumps(asyncio.run(run_case(path, model, int(n)))))
        return 0
    failed = False
    print(f"{'case':<22} {'peak RSS':>10} {'seconds':>9}  result")
    peaks = []
    for path, model, n in CASES_QUICK if args.quick else CASES_FULL if args.full else CASES:
        cmd = [sys.executable, __file__, "--case", path, model, str(n)]
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=args.timeout, check=False)
        except subprocess.TimeoutExpired:
            print(f"{path} {model} {n}: over {args.timeout:.0f} s, skipped")
            continue
        if done.returncode:
            print(f"{path} {model} {n}: failed\n{done.stderr.decode()[-2000:]}")
            failed = True
            continue
        out = json.loads(done.stdout.decode().strip().splitlines()[-1])
        extra = {k: v for k, v in out.items() if k not in ("case", "peak_mib", "seconds")}
        print(f"{out['case']:<22} {out['peak_mib']:>7.0f} MiB {out['seconds']:>9.1f}  {extra}")
        if path == "ll" and model == "mock":
            peaks.append(out["peak_mib"])
        diff = out.get("unwindowed_diff", 0.0)
        # The mock's rows do not depend on the batch: the sums must agree to 1e-9. A
        # real model's float32 forwards of other shapes (a prefix forward of the whole
        # text against one per window) differ in the last bits: 1e-7 relative.
        allowed = 1e-9 if model == "mock" else 1e-7 * abs(out["logprob"])
        if diff > allowed:
            print(f"  differs from the unwindowed result by {diff:.3g} (allowed {allowed:.3g})")
            failed = True
        sys.stdout.flush()
    if len(peaks) > 1:
        spread = max(peaks) - min(peaks)
        verdict = "ok" if spread <= BAR_MIB else "over the bar"
        print(
            f"log_likelihood (mock) peak RSS spread across sizes: {spread:.0f} MiB ({verdict}, "
            f"bar: flat within {BAR_MIB} MiB); largest growth {max(peaks):.0f} MiB"
        )
        failed |= spread > BAR_MIB
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

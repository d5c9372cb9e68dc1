"""genlm-mlx's AsyncMlxLM vs genlm-backend 0.3.1's, with genlm-hf's figure beside them.

Scenario ``sis-smollm2`` (CPU, fp32, ``HF_HUB_OFFLINE=1``, SmolLM2-135M-Instruct from
genlm-core's asset cache): genlm-backend's README example, sequential importance
sampling with a byte-length token mask, 32 particles x 16 tokens (EOS forced after 16,
so each particle makes 17 calls). The workload (sampler, mask, request replay) is
``benchmarks/bench_hf.py``'s, imported from it, so the three backends run the same
program. Figures: log-prob calls per second

* end to end with the inverse-CDF particle step (the bar: >= 2x genlm-backend's
  ``AsyncMlxLM``), and
* the request stream recorded from our run, replayed as the same concurrent waves
  without a sampler (the backend's own calls per second).

Each repeat starts from cold caches; backends interleave within a repeat, so load
from other processes hits them alike. Medians over ``--repeats`` and ratios are
printed. genlm-backend's ``AsyncMlxLM`` needs ``mlx-lm<0.32``; with a newer mlx-lm it
is skipped with the reason. On Linux, mlx runs on MKL's BLAS when ``genlm-mlx[mkl]``
is installed (the line ``BLAS:`` says which), for all MLX backends alike.

Run: ``python benchmarks/bench_mlx.py`` (``--quick`` for a short run).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

MODEL = "smollm2-135m-instruct"
BAR = 2.0


def engine_missing() -> str | None:
    """Why this benchmark cannot run here (None when it can)."""
    missing = [m for m in ("mlx", "mlx_lm", "genlm_mlx") if importlib.util.find_spec(m) is None]
    if missing:
        return (
            f"{', '.join(missing)} not installed in this environment; "
            f"pip install 'genlm-mlx[mkl]' (nox -s bench does)"
        )
    return None


def reference_missing() -> str | None:
    """Why genlm-backend 0.3.1's AsyncMlxLM cannot run here (None when it can)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        backend = version("genlm-backend")
    except PackageNotFoundError:
        return "genlm-backend is not installed (pip install genlm-backend==0.3.1)"
    mlx_lm = version("mlx-lm")
    major, minor = (int(x) for x in mlx_lm.split(".")[:2])
    if (major, minor) >= (0, 32):
        return f"genlm-backend {backend}'s AsyncMlxLM needs mlx-lm<0.32, this is mlx-lm {mlx_lm}"
    return None


def load(kind: str, path: str) -> Any:
    """One backend on the model at ``path``."""
    if kind == "ours":
        from genlm_mlx.lm import AsyncMlxLM

        return AsyncMlxLM.from_name(path)
    if kind == "ref":
        from genlm.backend.llm.mlx import AsyncMlxLM as Reference

        return Reference.from_name(path)
    from genlm_hf.lm import AsyncTransformer

    return AsyncTransformer.from_name(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short run (4 tokens, 1 repeat)")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--particles", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=None)
    args = parser.parse_args()
    reason = engine_missing()
    if reason:
        print(f"bench_mlx: skipped: {reason}")
        return 0

    from genlm_mlx.lm import blas_status  # first: puts a fast BLAS under mlx on Linux

    blas = blas_status()
    import mlx.core as mx
    import torch
    from bench_hf import PROMPTS, asset, replay, sis

    repeats = args.repeats or (1 if args.quick else 3)
    tokens = args.tokens or (4 if args.quick else 16)
    particles = args.particles
    versions = {}
    for dist in ("mlx", "mlx-lm", "genlm-backend"):
        try:
            from importlib.metadata import version

            versions[dist] = version(dist)
        except Exception:  # noqa: BLE001 - informative only
            versions[dist] = "absent"
    print(
        f"mlx {versions['mlx']} ({mx.default_device()}), mlx-lm {versions['mlx-lm']}, "
        f"genlm-backend {versions['genlm-backend']}, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), repeats={repeats}"
    )
    print(f"BLAS: {blas}")

    kinds = ["ours"]
    ref_reason = reference_missing()
    if ref_reason:
        print(f"reference skipped: {ref_reason}")
    else:
        kinds.append("ref")
    if importlib.util.find_spec("genlm_hf") is not None:
        kinds.append("hf")
    else:
        print("hf figure skipped: genlm-hf is not installed")

    path = asset(MODEL)
    print(f"\n== sis-smollm2: SIS, {particles} particles x {tokens} tokens, {MODEL} fp32 ==")
    lms = {kind: load(kind, path) for kind in kinds}
    prompt = lms["ours"].tokenizer.encode(PROMPTS[0])
    for lm in lms.values():  # warm-up, excluded
        asyncio.run(sis(lm, prompt, min(particles, 8), 2, seed=123, sampler="inverse-cdf"))
    e2e: dict[str, list[float]] = {k: [] for k in kinds}
    rep: dict[str, list[float]] = {k: [] for k in kinds}
    for r in range(repeats):
        order = kinds[r % len(kinds) :] + kinds[: r % len(kinds)]  # rotate who goes first
        steps: list[list[list[int]]] = []
        for kind in order:
            lm = lms[kind]
            lm.clear_cache()
            gc.collect()  # each run pays for its own garbage, not the previous run's
            record = steps if kind == "ours" else None
            t0 = time.perf_counter()
            calls = asyncio.run(sis(lm, prompt, particles, tokens, r, record, "inverse-cdf"))
            dt = time.perf_counter() - t0
            e2e[kind].append(calls / dt)
            print(
                f"  repeat {r} SIS  {kind:4s}: {calls} calls in {dt:6.2f} s = {calls / dt:6.1f}/s"
            )
        for kind in order:
            lm = lms[kind]
            lm.clear_cache()
            gc.collect()
            t0 = time.perf_counter()
            calls = asyncio.run(replay(lm, steps))
            dt = time.perf_counter() - t0
            rep[kind].append(calls / dt)
            print(
                f"  repeat {r} replay {kind:4s}: {calls} calls in {dt:6.2f} s = {calls / dt:6.1f}/s"
            )

    names = {"ours": "genlm-mlx", "ref": "genlm-backend AsyncMlxLM", "hf": "genlm-hf"}
    for label, figures in (("SIS end to end (inverse-CDF)", e2e), ("replayed stream", rep)):
        med = {k: statistics.median(v) for k, v in figures.items()}
        parts = [f"{names[k]} {med[k]:.1f}" for k in kinds]
        line = f"  {label}, median calls/s: " + ", ".join(parts)
        if "ref" in med:
            ratio = med["ours"] / med["ref"]
            line += f"; genlm-mlx / reference = {ratio:.2f}x"
            if figures is e2e:
                line += f" (bar >= {BAR:g}x: {'PASS' if ratio >= BAR else 'FAIL'})"
        if "hf" in med:
            line += f"; genlm-mlx / genlm-hf = {med['ours'] / med['hf']:.2f}x"
        print(line)
    print(f"  genlm-mlx KV cache: {lms['ours'].kv_cache_stats}")
    for lm in lms.values():
        if hasattr(lm, "cleanup"):
            lm.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How K and prune_threshold trade accuracy for speed: next-byte error against K=64.

For each beam setting, prefill texts and, at several points, compare the next-byte
distribution with a wide beam's (K=64, no threshold), which stands in for the exact
sum over tokenizations. Printed per setting: total variation distance (mean and
max over the points), the largest |log-prob difference| over bytes the wide beam
gives at least 1e-3, and seconds per byte of prefill. The table in docs/bytes.md
comes from this script.

Run: ``python benchmarks/bytes_accuracy.py`` (SmolLM2-135M-Instruct, fp32, CPU).
"""

from __future__ import annotations

import asyncio
import os
import time

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from genlm_bytelm import BeamParams, ByteBeamState  # noqa: E402

TEXTS = [
    b"The history of the city dates back to the Roman period, when a small settlement "
    b"grew up around a bridge over the river.",
    b"def mean(xs):\n    if not xs:\n        raise ValueError('empty')\n"
    b"    return sum(xs) / len(xs)\n",
]
POINTS = 5  # places per text where the distributions are compared
SETTINGS = [(64, 0.0), (32, 0.0), (16, 0.0), (8, 0.0), (4, 0.0), (2, 0.0), (1, 0.0)]
SETTINGS += [(16, 0.05), (4, 0.05), (4, 0.01), (1, 0.05)]


async def distributions(llm, k: float, threshold: float) -> tuple[list[np.ndarray], float]:
    """Next-byte log-probs at the comparison points, and seconds per prefilled byte."""
    out, seconds, n = [], 0.0, 0
    for text in TEXTS:
        llm.clear_cache()  # each setting pays for its own model calls
        beam = await ByteBeamState.initial(llm, BeamParams(K=k, prune_threshold=threshold))
        cuts = [len(text) * (i + 1) // POINTS for i in range(POINTS)]
        done = 0
        for cut in cuts:
            t0 = time.perf_counter()
            beam = await beam.prefill(text[done:cut])
            seconds += time.perf_counter() - t0
            n += cut - done
            done = cut
            out.append((await beam.logp_next()).ps.copy())
    return out, seconds / n


async def main() -> None:
    from genlm_core import load_model_by_name
    from genlm_core.testing.assets import model_dir

    llm = load_model_by_name(str(model_dir("smollm2-135m-instruct")), backend="hf")
    reference, _ = await distributions(llm, *SETTINGS[0])
    print(
        "| K | prune_threshold | TV distance, mean | TV, max | max abs log-prob error "
        "(p >= 1e-3) | s/byte (prefill) |"
    )
    print("|---|---|---|---|---|---|")
    for k, threshold in SETTINGS:
        dists, per_byte = await distributions(llm, k, threshold)
        tv, err = [], 0.0
        for ref, got in zip(reference, dists, strict=True):
            p, q = np.exp(ref), np.exp(got)
            tv.append(0.5 * np.abs(p - q).sum())
            likely = p >= 1e-3
            err = max(err, float(np.abs(ref[likely] - got[likely]).max()))
        print(
            f"| {k} | {threshold:g} | {np.mean(tv):.2e} | {max(tv):.2e} | {err:.2e} | "
            f"{per_byte:.3f} |",
            flush=True,
        )
    llm.cleanup()


if __name__ == "__main__":
    asyncio.run(main())

"""Token tries: genlm-core vs genlm-backend 0.3.1, same vocabularies, same run.

For each vocabulary (GPT-2 50k, Llama-3 128k, Gemma-3 262k tokens):

* build time: ``genlm_core.trie.TokenCharacterTrie`` vs genlm-backend's
  ``TokenCharacterTrie`` (numba JIT compilation is excluded: it is cached on disk
  after the first run, and reported separately);
* ``weight_sum`` / ``weight_max`` of one distribution vs genlm-backend's
  sequential ``TokenCharacterTrie``;
* ``batch_weight_sum`` / ``batch_weight_max`` of 32 distributions vs genlm-backend's
  ``ParallelTokenCharacterTrie`` on the CPU (both return float32).

Prints medians over repeats of wall-clock and process CPU time (genlm-backend and
genlm-core timed in alternating blocks, so both see the same machine load) and
the speed-ups (genlm-backend time / ours). On a shared machine the CPU-time
column is the steadier one.

    python benchmarks/bench_trie.py            # all three vocabularies
    python benchmarks/bench_trie.py --quick    # fewer repeats
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings
from collections.abc import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numba  # noqa: E402
import numpy as np  # noqa: E402

VOCABS = {"gpt2": "gpt2-npm", "llama3": "llama3", "gemma3": "gemma3"}


def compare(
    theirs: Callable[[], object], ours: Callable[[], object], repeats: int, warmup: bool = True
) -> dict[str, float]:
    """Median wall and CPU times of both, measured in alternating blocks.

    Blocks (a warm-up call, then ``block`` timed calls of one side, then of the other)
    let both sides see the same machine load, while the first call after the other
    library ran (cold caches, freshly faulted memory) is not timed for either.
    """
    block = max(1, repeats // 3)
    times: dict[str, list[tuple[float, float]]] = {"theirs": [], "ours": []}
    done = 0
    while done < repeats:
        n = min(block, repeats - done)
        for side, fn in (("theirs", theirs), ("ours", ours)):
            if warmup:
                fn()
            for _ in range(n):
                wall, cpu = time.perf_counter(), time.process_time()
                fn()
                times[side].append((time.perf_counter() - wall, time.process_time() - cpu))
        done += n
    return {
        f"{side}_{kind}": statistics.median(t[i] for t in ts)
        for side, ts in times.items()
        for i, kind in enumerate(("wall", "cpu"))
    }


def load_vocab(asset: str) -> list:
    from genlm.backend.tokenization import decode_vocab
    from transformers import AutoTokenizer

    from genlm_core.testing.assets import tokenizer_dir

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir(asset))
    byte_vocab, _ = decode_vocab(tokenizer)
    return byte_vocab


def fmt(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:8.2f} s "
    if seconds >= 1e-3:
        return f"{seconds * 1e3:8.2f} ms"
    return f"{seconds * 1e6:8.1f} us"


def row(name: str, what: str, t: dict[str, float]) -> dict:
    ratio = t["theirs_wall"] / t["ours_wall"]
    cpu_ratio = t["theirs_cpu"] / max(t["ours_cpu"], 1e-9)
    flag = "" if ratio >= 10 else "  (< 10x)"
    print(
        f"  {what:<36} {fmt(t['theirs_wall'])} {fmt(t['ours_wall'])} {ratio:7.1f}x"
        f"   cpu {fmt(t['theirs_cpu'])} {fmt(t['ours_cpu'])} {cpu_ratio:7.1f}x{flag}"
    )
    return {"vocab": name, "what": what, "ratio": ratio, "cpu_ratio": cpu_ratio, **t}


def bench_vocab(name: str, asset: str, args: argparse.Namespace) -> list[dict]:
    from genlm.backend.trie import ParallelTokenCharacterTrie as TheirParallel
    from genlm.backend.trie import TokenCharacterTrie as TheirTrie

    from genlm_core.trie import ParallelTokenCharacterTrie, TokenCharacterTrie

    vocab = load_vocab(asset)
    print(f"\n{name}: {len(vocab)} tokens")
    results = []

    start = time.perf_counter()
    ours = TokenCharacterTrie(vocab)  # first build in this process: loads/compiles kernels
    first = time.perf_counter() - start
    print(f"  first build incl. loading numba kernels: {fmt(first)}; {ours.num_nodes} nodes")
    print(f"  {'':<36} {'genlm-backend':>11} {'genlm-core':>11} {'speed-up':>8}   (CPU time)")
    t = compare(
        lambda: TheirTrie(vocab), lambda: TokenCharacterTrie(vocab), args.build_repeats, False
    )
    results.append(row(name, "build TokenCharacterTrie", t))

    theirs = TheirTrie(vocab)
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.full(len(vocab), 0.3)).astype(np.float64)
    for op in ("weight_sum", "weight_max"):
        t = compare(
            lambda op=op: getattr(theirs, op)(probs),
            lambda op=op: getattr(ours, op)(probs),
            args.repeats,
        )
        results.append(row(name, f"{op} (1 distribution)", t))

    batch = rng.dirichlet(np.full(len(vocab), 0.3), size=args.batch).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch sparse beta warnings
        their_parallel = TheirParallel(vocab, device="cpu")
    our_parallel = ParallelTokenCharacterTrie(vocab, device="cpu")
    for op in ("batch_weight_sum", "batch_weight_max"):
        t = compare(
            lambda op=op: getattr(their_parallel, op)(batch),
            lambda op=op: getattr(our_parallel, op)(batch),
            args.batch_repeats,
        )
        results.append(row(name, f"{op} ({args.batch} distributions)", t))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument(
        "--vocabs", nargs="+", choices=sorted(VOCABS), default=list(VOCABS), help="vocabularies"
    )
    parser.add_argument("--batch", type=int, default=32, help="distributions per batch call")
    args = parser.parse_args()
    args.build_repeats = 1 if args.quick else 3
    args.repeats = 10 if args.quick else 50
    args.batch_repeats = 3 if args.quick else 10

    print(
        f"genlm-core tries vs genlm-backend 0.3.1; numba threads: {numba.get_num_threads()}, "
        f"CPUs: {os.cpu_count()}; medians of {args.repeats} (single), {args.batch_repeats} "
        f"(batch), {args.build_repeats} (build) repeats"
    )
    results = []
    for name in args.vocabs:
        results.extend(bench_vocab(name, VOCABS[name], args))
    worst = min(results, key=lambda r: r["ratio"])
    print(
        f"\nsmallest wall-clock speed-up: {worst['ratio']:.1f}x ({worst['vocab']}, "
        f"{worst['what']}); target >= 10x: {'met' if worst['ratio'] >= 10 else 'NOT met'}"
    )
    worst = min(results, key=lambda r: r["cpu_ratio"])
    print(
        f"smallest CPU-time speed-up: {worst['cpu_ratio']:.1f}x ({worst['vocab']}, {worst['what']})"
    )


if __name__ == "__main__":
    main()

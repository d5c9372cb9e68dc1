"""Token tries: genlm-core vs genlm-backend 0.3.1, same vocabularies, same run.

For each vocabulary (GPT-2 50k, Llama-3 128k, Gemma-3 262k tokens):

* build time: ``genlm_core.trie.TokenCharacterTrie`` vs genlm-backend's
  ``TokenCharacterTrie`` (numba JIT compilation is excluded: it is cached on disk
  after the first run, and reported separately);
* ``weight_sum`` / ``weight_max`` of one distribution vs genlm-backend's
  sequential ``TokenCharacterTrie``;
* ``batch_weight_sum`` / ``batch_weight_max`` of 32 distributions vs genlm-backend's
  ``ParallelTokenCharacterTrie`` on the CPU (both return float32);
* the memory-traffic bound of one ``weight_sum``: the bytes its kernel must read
  (the weights and the schedule arrays it walks) and write (the node masses), over
  this machine's single-thread memory bandwidth (a large NumPy copy, best of
  several), and our measured time as a multiple of that bound.

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

    from genlm_assets import tokenizer_dir

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir(asset))
    byte_vocab, _ = decode_vocab(tokenizer)
    return byte_vocab


def measure_bandwidth(megabytes: int = 512, repeats: int = 10) -> float:
    """Single-thread memory bandwidth in GB/s: a large NumPy copy, best of ``repeats``.

    A copy reads the source and writes the destination, so it moves twice its size
    (write-allocate traffic not counted, as in STREAM). One thread, like the
    single-distribution kernel it bounds; both arrays are touched first so page
    faults are not timed.
    """
    src = np.ones(megabytes * 2**20 // 8)
    dst = np.zeros_like(src)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return 2 * src.nbytes / best / 1e9


def weight_sum_traffic(trie, ws: np.ndarray) -> dict[str, int]:
    """Bytes one ``weight_sum`` must move, counted from the arrays ``_kernels._fill_row`` touches.

    Read: the weights, ``token_src`` (where each weight goes), ``branch``,
    ``branch_ptr``, ``branch_src`` (which sources each branch node adds) and
    ``node_src`` (which source each node's mass is). Written: the masses (one float64
    per node). The float64 scratch (one per source) is written and read back; it is
    reported apart, not counted in the bound (it may stay in cache).
    """
    plan = trie._plan
    structure = sum(
        a.nbytes
        for a in (plan.token_src, plan.branch, plan.branch_ptr, plan.branch_src, plan.node_src)
    )
    return {
        "weights": ws.nbytes,
        "structure": structure,
        "masses": trie.num_nodes * np.dtype(trie.out_dtype).itemsize,
        "scratch": plan.num_sources * 8,
    }


def report_memory_bound(ours, probs: np.ndarray, t: dict[str, float], bandwidth: float) -> dict:
    traffic = weight_sum_traffic(ours, probs)
    moved = traffic["weights"] + traffic["structure"] + traffic["masses"]
    bound = moved / (bandwidth * 1e9)
    ratio = t["ours_wall"] / bound
    mb = {k: v / 1e6 for k, v in traffic.items()}
    print(
        f"  memory bound of weight_sum: read {mb['weights']:.2f} MB weights + "
        f"{mb['structure']:.2f} MB structure, write {mb['masses']:.2f} MB masses = "
        f"{moved / 1e6:.2f} MB at {bandwidth:.1f} GB/s = {fmt(bound).strip()}; ours "
        f"{fmt(t['ours_wall']).strip()} = {ratio:.2f}x the bound (scratch {mb['scratch']:.2f} MB "
        f"not counted)"
    )
    return {"bytes": moved, "bound": bound, "ratio": ratio}


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


def bench_vocab(
    name: str, asset: str, args: argparse.Namespace, bandwidth: float
) -> tuple[list[dict], dict]:
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
        if op == "weight_sum":
            bound = report_memory_bound(ours, probs, t, bandwidth)

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
    return results, {"vocab": name, **bound}


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
    bandwidth = measure_bandwidth(repeats=3 if args.quick else 10)
    print(f"memory bandwidth (1 thread, NumPy copy of 512 MiB, best): {bandwidth:.1f} GB/s")
    results, bounds = [], []
    for name in args.vocabs:
        rows, bound = bench_vocab(name, VOCABS[name], args, bandwidth)
        results.extend(rows)
        bounds.append(bound)
    worst = min(results, key=lambda r: r["ratio"])
    print(
        f"\nsmallest wall-clock speed-up: {worst['ratio']:.1f}x ({worst['vocab']}, "
        f"{worst['what']}); target >= 10x: {'met' if worst['ratio'] >= 10 else 'NOT met'}"
    )
    worst = min(results, key=lambda r: r["cpu_ratio"])
    print(
        f"smallest CPU-time speed-up: {worst['cpu_ratio']:.1f}x ({worst['vocab']}, {worst['what']})"
    )
    print(
        "weight_sum vs its memory-traffic bound: "
        + ", ".join(
            f"{b['vocab']} {b['bytes'] / 1e6:.1f} MB, {fmt(b['bound']).strip()}, {b['ratio']:.2f}x"
            for b in bounds
        )
    )


if __name__ == "__main__":
    main()

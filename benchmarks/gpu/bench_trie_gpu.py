"""The torch-cuda token trie vs genlm-backend's ParallelTokenCharacterTrie, on a GPU.

For GPT-2 (50k tokens), Llama-3 (128k) and Gemma-3 (262k), genlm-core's
``TorchTokenCharacterTrie`` and genlm-backend 0.3.1's ``ParallelTokenCharacterTrie``
are built on ``--device`` from one decode list (genlm-backend Tokens), and we report:

* build times;
* identical masses on 1 and 32 distributions (random log-probs, their exp for sums),
  weights on the host and on the device: maxima bit for bit; sums (float32, added in
  different orders) each within gamma_n = n u / (1 - n u) of the exact float64 sum
  of the same weights, n being the entries below the node (u = 2**-24; any order of
  adding n non-negative terms is within it: Higham, Accuracy and Stability, 4.2);
* medians of the call's wall-clock (it returns NumPy arrays; CUDA synchronised
  around it) for weight_sum / weight_max of 1, 32 and 256 distributions, weights
  (a) on the host (CPU tensors) or (b) already on the GPU; speed-up = theirs / ours;
* each call's floor: max(GPU bytes read + written / GPU memory bandwidth, PCIe bytes /
  page-locked PCIe bandwidth), the PCIe bytes being the weights if on the host (at
  the host->device rate) plus the masses, which must reach NumPy (device->host rate);
* where our time goes on Llama-3's batch_weight_sum of 256, and the chunk size;
* the bar (issue 28): that call at least 3x genlm-backend and within 3x of the floor.

``--dump-vocabs DIR`` (where the asset tokenizers can be built) writes each decoded
vocabulary (genlm_core's decode_vocab) to DIR/<name>.vocab.xz; ``--vocab-dir DIR``
reads them: the GPU machine needs neither tokenizers nor network.

    python benchmarks/gpu/bench_trie_gpu.py --dump-vocabs .gpu/vocabs
    python benchmarks/gpu/bench_trie_gpu.py --vocab-dir .gpu/vocabs --out trie_gpu.json
    python benchmarks/gpu/bench_trie_gpu.py --device cpu --quick --vocab-dir .gpu/vocabs
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from vocab_files import VOCABS, decoded_words, dump_vocabs, make_decode, read_vocab  # noqa: E402

U = 2.0**-24  # float32 unit roundoff
BAR_VOCAB, BAR_BATCH, BAR_SPEEDUP, BAR_FLOOR = "llama3", 256, 3.0, 3.0
NAN = float("nan")


# -- timing -----------------------------------------------------------------------------


def fmt(seconds: float) -> str:
    if seconds != seconds:  # NaN: not measured
        return f"{'-':>8}   "
    if seconds >= 1:
        return f"{seconds:8.2f} s "
    if seconds >= 1e-3:
        return f"{seconds * 1e3:8.2f} ms"
    return f"{seconds * 1e6:8.1f} us"


class Clock:
    """Wall-clock timings with the device synchronised around each call; CUDA events."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def time(self, fn: Callable[[], object], repeats: int) -> dict:
        """The first call (warm-up: pins, allocates) and the median of ``repeats`` more."""
        times = []
        for _ in range(repeats + 1):
            self.sync()
            start = time.perf_counter()
            fn()
            self.sync()
            times.append(time.perf_counter() - start)
        return {"first": times[0], "median": statistics.median(times[1:]), "best": min(times)}

    def events(self, fn: Callable[[], object], repeats: int) -> float:
        """Median device time of ``fn`` between CUDA events, after a warm-up."""
        fn()
        out = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) / 1e3)
        return statistics.median(out)


def measure_bandwidths(clock: Clock, device: torch.device, quick: bool) -> dict | None:
    """GPU memory (a device copy: read + write) and PCIe bandwidths, GB/s, best of several."""
    if not clock.cuda:
        print("bandwidths and floors: skipped (CUDA only; this is --device cpu)")
        return None
    size, reps = (256 if quick else 512) << 20, 3 if quick else 5
    a = torch.ones(size // 4, device=device)
    b = torch.empty_like(a)
    pinned = torch.ones(size // 4).pin_memory()
    pageable = torch.ones(size // 4)  # touched: no first-touch faults timed
    out = {"hbm": 2 * size / clock.events(lambda: b.copy_(a), reps) / 1e9}
    for key, fn in (
        ("h2d_pinned", lambda: a.copy_(pinned, non_blocking=True)),
        ("d2h_pinned", lambda: pinned.copy_(a, non_blocking=True)),
        ("h2d_pageable", lambda: a.copy_(pageable)),
        ("d2h_pageable", lambda: pageable.copy_(a)),
        ("d2h_new_numpy", lambda: a.cpu().numpy()),  # what genlm-backend does
    ):
        out[key] = size / clock.time(fn, reps)["best"] / 1e9
    print(
        f"bandwidths (GB/s, {size >> 20} MiB, best of {reps}): GPU memory {out['hbm']:.0f} "
        f"(read + write); PCIe page-locked host->device {out['h2d_pinned']:.1f}, device->host "
        f"{out['d2h_pinned']:.1f}; pageable {out['h2d_pageable']:.1f} / {out['d2h_pageable']:.1f};"
        f" device->new NumPy array (.cpu().numpy()) {out['d2h_new_numpy']:.1f}"
    )
    return out


def floor_of(trie, op: str, batch: int, on_host: bool, bw: dict | None) -> dict | None:
    """The floor (seconds) of one call, and what it counts."""
    if bw is None:
        return None
    weights, masses = batch * len(trie.decode) * 4, batch * trie.num_nodes * 4
    reach = trie._reach
    if op == "sum":  # the CSR matrix: column indices, values, row pointers
        parts = (reach.col_indices(), reach.values(), reach.crow_indices())
        structure = sum(t.numel() * t.element_size() for t in parts)
    else:  # the (token, node) index pairs
        structure = trie._src.numel() * 8 * 2
    gpu_bytes = weights + masses + structure
    gpu = gpu_bytes / (bw["hbm"] * 1e9)
    pcie = masses / (bw["d2h_pinned"] * 1e9)
    pcie += weights / (bw["h2d_pinned"] * 1e9) if on_host else 0.0
    return {"floor": max(gpu, pcie), "gpu_bytes": gpu_bytes, "gpu_s": gpu, "pcie_s": pcie}


# -- one vocabulary ---------------------------------------------------------------------


def call(trie, op: str, x):
    """``weight_<op>`` of one distribution (1-D), ``batch_weight_<op>`` of a batch."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # genlm-backend's torch sparse beta warnings
        return getattr(trie, f"{'batch_' if x.ndim == 2 else ''}weight_{op}")(x)


def check_masses(ours, theirs, exact, inputs: dict) -> dict:
    """Every variant's sums within gamma_n of the exact sums; maxima equal to the exact."""
    n_below = exact.weight_sum(np.ones(len(ours.decode)))  # entries below each node
    gamma = n_below * U / (1 - n_below * U)
    slack = n_below * 2.0**-149  # subnormal rounding, per term
    tiny = np.finfo(np.float32).tiny
    out = {"sum_ok": True, "max_ok": True, "root_bound": float(gamma[ours.root]), "failed": []}
    worst: dict[str, float] = {}
    tries = {"ours": ours, "theirs": theirs} if theirs is not None else {"ours": ours}
    host_p, host_lp = inputs["host"]
    for rows in (1, min(32, len(host_p))):
        want = exact.batch_weight_sum(host_p[:rows].double())
        want_max = exact.batch_weight_max(host_lp[:rows].double()).astype(np.float32)
        sums = {}
        for who, trie in tries.items():
            for where, (p, lp) in inputs.items():
                if who == "theirs" and where == "numpy":
                    continue  # genlm-backend takes NumPy rows one by one: same as host
                key = f"{who}/{where}"
                x, xl = (p[0], lp[0]) if rows == 1 else (p[:rows], lp[:rows])
                masses = call(trie, "sum", x).reshape(rows, -1)
                assert isinstance(masses, np.ndarray) and masses.dtype == np.float32, key
                err = np.abs(masses.astype(np.float64) - want)
                if not np.all(err <= gamma * want + slack):
                    out["sum_ok"] = False
                    out["failed"].append(f"sum {key} x{rows}")
                worst[key] = max(worst.get(key, 0.0), float(np.max(err / np.maximum(want, tiny))))
                sums[key] = masses
                if not np.array_equal(call(trie, "max", xl).reshape(rows, -1), want_max):
                    out["max_ok"] = False
                    out["failed"].append(f"max {key} x{rows}")
        for where in ("host", "device"):
            if f"theirs/{where}" in sums:
                diff = np.abs(sums[f"ours/{where}"] - sums[f"theirs/{where}"].astype(np.float64))
                key = f"ours - theirs ({where})"
                worst[key] = max(worst.get(key, 0.0), float(np.max(diff / np.maximum(want, tiny))))
    out["worst_relative"] = worst
    print(
        f"  masses {'PASS' if out['sum_ok'] and out['max_ok'] else 'FAIL'}: sums within the "
        f"float32 bound: {'yes' if out['sum_ok'] else 'NO'} (gamma_n at the root "
        f"{out['root_bound']:.1e}); maxima exact: {'yes' if out['max_ok'] else 'NO'}"
        f"{' ' + str(out['failed']) if out['failed'] else ''}\n"
        "  largest relative errors of the sums (vs exact): "
        + ", ".join(f"{k} {v:.1e}" for k, v in worst.items())
    )
    return out


def bench_vocab(name: str, words: list[bytes], args, clock: Clock, bw: dict | None) -> dict:
    from genlm_trie_torch import TorchTokenCharacterTrie

    device = torch.device(args.device)
    decode = make_decode(words)
    v = len(decode)
    out: dict = {"tokens": v}
    print(f"\n{name}: {v} tokens")
    clock.sync()
    start = time.perf_counter()
    ours = TorchTokenCharacterTrie(decode, device=device)
    clock.sync()
    out["build_ours"] = time.perf_counter() - start
    theirs = None
    if (theirs_cls := reference_class()) is not None:
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = theirs_cls(decode, device=args.device)
        clock.sync()
        out["build_theirs"] = time.perf_counter() - start
        assert len(theirs.children) == ours.num_nodes, "node counts differ"
    print(
        f"  build: genlm-backend {fmt(out.get('build_theirs', NAN)).strip()}, ours "
        f"{fmt(out['build_ours']).strip()}; {ours.num_nodes} nodes, {ours._src.numel()} "
        f"(token, node) pairs, {ours._chunk_rows()} rows per chunk"
    )

    gen = torch.Generator(device=device).manual_seed(0)
    logp = torch.log_softmax(3 * torch.randn(max(args.batches), v, generator=gen, device=device), 1)
    on_device = {"sum": logp.exp(), "max": logp}
    host = {op: t.cpu() for op, t in on_device.items()}
    inputs = {"host": (host["sum"], host["max"]), "device": (on_device["sum"], logp)}
    inputs["numpy"] = (host["sum"].numpy(), host["max"].numpy())
    exact = TorchTokenCharacterTrie(decode, device="cpu", dtype=torch.float64)
    out["check"] = check_masses(ours, theirs, exact, inputs)
    del exact

    wheres = ["host", "device"] if clock.cuda else ["host"]
    if not clock.cuda:
        print("  (b) weights on the GPU: skipped (--device cpu: host tensors are on the device)")
    print(
        f"  {'':<30}{'genlm-backend':>13}{'ours':>12}{'speed-up':>10}{'floor':>12}"
        f"{'ours/floor':>11}   (first call: theirs / ours)"
    )
    rows = []
    for op in ("sum", "max"):
        for batch in (1, *args.batches):
            for where in wheres:
                x = (host if where == "host" else on_device)[op][:batch]
                x = x[0] if batch == 1 else x
                reps = args.repeats[batch]
                row = {"op": f"{'batch_' if batch > 1 else ''}weight_{op}", "batch": batch}
                row.update(weights=where, theirs=NAN, theirs_first=NAN, speedup=None)
                if theirs is not None:
                    t = clock.time(lambda op=op, x=x: call(theirs, op, x), reps)
                    row["theirs"], row["theirs_first"] = t["median"], t["first"]
                t = clock.time(lambda op=op, x=x: call(ours, op, x), reps)
                row["ours"], row["ours_first"] = t["median"], t["first"]
                if theirs is not None:
                    row["speedup"] = row["theirs"] / row["ours"]
                floor = floor_of(ours, op, batch, where == "host", bw)
                if floor is not None:
                    row.update(floor, ours_over_floor=row["ours"] / floor["floor"])
                rows.append(row)
                speed = f"{row['speedup']:9.1f}x" if row["speedup"] else f"{'-':>10}"
                flo = f"{'-':>12}{'-':>11}"
                if floor is not None:
                    flo = f"{fmt(row['floor'])}{row['ours_over_floor']:10.2f}x"
                print(
                    f"  {row['op'] + f' x{batch} {where}':<30}  {fmt(row['theirs'])} "
                    f"{fmt(row['ours'])}{speed} {flo}   ({fmt(row['theirs_first']).strip()} / "
                    f"{fmt(row['ours_first']).strip()})"
                )
    out["rows"] = rows
    if name == BAR_VOCAB and BAR_BATCH in args.batches:
        out["breakdown"] = breakdown(ours, on_device["sum"][:BAR_BATCH], rows, args, clock)
    return out


def breakdown(ours, x: torch.Tensor, rows: list[dict], args, clock: Clock) -> dict | None:
    """Where our batch_weight_sum's time goes: device work, copies, the rest; chunk sizes."""
    if not clock.cuda:
        print("  breakdown: skipped (CUDA events; this is --device cpu)")
        return None
    batch, n = x.shape[0], ours.num_nodes
    per, reps = ours._chunk_rows(), 3 if args.quick else 5
    buf = torch.empty(batch, n, device=x.device)
    pinned = torch.empty(batch, n, pin_memory=True)
    host_in = torch.empty(batch, x.shape[1], pin_memory=True)
    dev_in = torch.empty_like(x)

    def spmm():  # the first sparse product alone (rows cut at ROW_LIMIT)
        for lo in range(0, batch, per):
            torch.mm(ours._reach, x[lo : lo + per].T.contiguous())

    def device_work():  # everything ours computes on the device: products + transpose
        for lo in range(0, batch, per):
            ours._compute("sum", x[lo : lo + per], buf[lo : lo + per])

    out = {
        "rows_per_chunk": per,
        "spmm": clock.events(spmm, reps),
        "device_work": clock.events(device_work, reps),
        "d2h_masses": clock.events(lambda: pinned.copy_(buf, non_blocking=True), reps),
        "h2d_weights": clock.events(lambda: dev_in.copy_(host_in, non_blocking=True), reps),
    }
    print(
        f"  breakdown of batch_weight_sum x{batch} ({per} rows per chunk): sparse product "
        f"{fmt(out['spmm']).strip()}, all device work {fmt(out['device_work']).strip()}, "
        f"masses to host {fmt(out['d2h_masses']).strip()}, weights to device "
        f"{fmt(out['h2d_weights']).strip()} (page-locked)"
    )
    for r in rows:
        if r["op"] == "batch_weight_sum" and r["batch"] == batch:
            copies = out["d2h_masses"] + (out["h2d_weights"] if r["weights"] == "host" else 0.0)
            rest = out[f"rest_{r['weights']}"] = r["ours"] - out["device_work"] - copies
            print(
                f"    weights on {r['weights']}: {fmt(r['ours']).strip()} = device work + "
                f"copies + {fmt(rest).strip()} (negative: overlap)"
            )
    sweep = {}
    for size in (8, 16, 32, 64, 128, 256):
        ours.max_batch_size = size
        sweep[size] = clock.time(lambda: ours.batch_weight_sum(x), reps)["median"]
    ours.max_batch_size = None
    out["chunk_sweep"] = sweep
    print(
        "    rows per chunk -> time (weights on device): "
        + ", ".join(f"{k}: {fmt(t).strip()}" for k, t in sweep.items())
    )
    return out


def reference_class():
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from genlm.backend.trie import ParallelTokenCharacterTrie
    except ImportError as exc:
        print(f"  genlm-backend not importable ({exc}): ours alone")
        return None
    return ParallelTokenCharacterTrie


def bar(report: dict) -> dict:
    """The issue's bar on Llama-3's batch_weight_sum of 256, weights on host and device."""
    verdicts = {}
    for r in report["vocabs"].get(BAR_VOCAB, {}).get("rows", []):
        if r["op"] != "batch_weight_sum" or r["batch"] != BAR_BATCH:
            continue
        speed, over = r.get("speedup"), r.get("ours_over_floor")
        ok = None  # no floor without a GPU
        if over is not None:
            ok = speed is not None and speed >= BAR_SPEEDUP and over <= BAR_FLOOR
        verdicts[r["weights"]] = ok
        print(
            f"BAR {BAR_VOCAB} batch_weight_sum x{BAR_BATCH}, weights on {r['weights']}: speed-up "
            f"{'-' if speed is None else f'{speed:.1f}x'} (>= {BAR_SPEEDUP:g}x), ours/floor "
            f"{'-' if over is None else f'{over:.2f}x'} (<= {BAR_FLOOR:g}x): "
            f"{'not assessed (no floor: no GPU)' if ok is None else 'PASS' if ok else 'FAIL'}"
        )
    checks = [v.get("check", {}) for v in report["vocabs"].values()]
    same = bool(checks) and all(c.get("sum_ok") and c.get("max_ok") for c in checks)
    print(f"BAR identical masses on every vocabulary: {'PASS' if same else 'FAIL'}")
    return {"speed": verdicts, "masses": same}


NO_GPU = (
    "skipped: --device cuda needs an NVIDIA GPU and a CUDA build of torch "
    "(torch.cuda.is_available() is False); --device cpu is a dry run of the same code"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (a dry run)")
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--vocab-dir", type=Path, help="read vocabularies from --dump-vocabs")
    parser.add_argument("--dump-vocabs", type=Path, metavar="DIR", help="write them and exit")
    parser.add_argument("--vocabs", nargs="+", choices=sorted(VOCABS), default=list(VOCABS))
    parser.add_argument("--batches", nargs="+", type=int, default=[32, 256])
    parser.add_argument("--out", type=Path, help="write every figure to this JSON file")
    args = parser.parse_args()
    if args.dump_vocabs:
        return dump_vocabs(args.dump_vocabs)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(NO_GPU)
        return None
    began = time.perf_counter()
    args.repeats = {1: 5 if args.quick else 20}
    args.repeats.update({b: 1 if args.quick else 5 if b <= 64 else 3 for b in args.batches})
    device = torch.device(args.device)
    clock = Clock(device)
    env = {"python": platform.python_version(), "torch": torch.__version__}
    env["cpus"] = os.cpu_count()
    env["device"] = torch.cuda.get_device_name(device) if clock.cuda else platform.processor()
    try:
        from importlib.metadata import version

        env["genlm-backend"] = version("genlm-backend")
    except Exception:  # noqa: BLE001 - reported as absent
        env["genlm-backend"] = None
    report: dict = {"args": {k: str(v) for k, v in vars(args).items()}, "env": env, "vocabs": {}}
    print(f"torch-cuda trie vs genlm-backend ParallelTokenCharacterTrie on {device}: {env}")
    from genlm_core.tokenization import Token
    from genlm_trie_torch import TorchTokenCharacterTrie

    start = time.perf_counter()
    TorchTokenCharacterTrie([Token(0, b"a"), Token(1, b"ab")], device=device)
    report["startup"] = time.perf_counter() - start
    print(f"CUDA context + numba kernels (compiled or loaded): {report['startup']:.2f} s")
    bw = report["bandwidths"] = measure_bandwidths(clock, device, args.quick)
    for name in args.vocabs:
        try:
            if args.vocab_dir:
                words = read_vocab(args.vocab_dir / f"{name}.vocab.xz")
            else:
                words = decoded_words(VOCABS[name])
            report["vocabs"][name] = bench_vocab(name, words, args, clock, bw)
        except Exception as exc:  # noqa: BLE001 - one vocabulary's failure keeps the others
            traceback.print_exc()
            report["vocabs"][name] = {"error": f"{type(exc).__name__}: {exc}"}
        if clock.cuda:
            torch.cuda.empty_cache()
    print()
    report["bar"] = bar(report)
    report["seconds"] = time.perf_counter() - began
    print(f"total {report['seconds']:.1f} s")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1, default=float))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

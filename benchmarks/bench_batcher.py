"""Throughput of request coalescing: genlm-core's AutoBatcher vs genlm-backend 0.3.1.

What is measured: requests per second through a zero-cost batch function
(``lambda keys: keys``), so only the scheduling overhead counts. N concurrent
callers (N = 1, 64, 1024) each issue sequential requests with distinct keys, so
deduplication never flatters the figures; each run totals about 20k requests
(at least 20 per caller). Median of ``--repeats`` runs (default 7, at least 5),
each on a fresh event loop.

The reference path. genlm-backend 0.3.1 has no stand-alone batcher: its
coalescing is the leader protocol ``AsyncLM._join_batch`` in
``genlm/backend/llm/base.py``, used by its MLX backend as ``future = create_future();
batch = await self._join_batch([(key, future)]); if batch is not None:
self._batch_evaluate(batch); return await future``, where the leader deduplicates the
keys, calls the model and resolves the futures. We drive exactly that: a subclass of
the real ``genlm.backend.llm.base.AsyncLM`` (constructed without a tokenizer, the
leader protocol does not use one) whose request method is the MLX path above minus
its cache and MLX forward. ``MockAsyncLM`` is not a fair reference: it does not batch
at all, it computes each request inline. The vLLM path adds an engine thread that
cannot run here.

Both evaluate a zero-cost batch on the event loop itself: 0.3.1's leader always does,
ours once its first batch, timed in the worker thread, showed batches cheaper than
the thread hand-off (``inline_below``, on by default for a batcher with its own
thread; a model's batches keep their worker thread, so callers' CPU work overlaps the
model). The default (and genlm-core's) max_batch_size is 64; 0.3.1 has no cap, hence
the bs=1024 column. Figures are noisy on a shared machine: the runs
of each row take turns so they share the same load.

Run: ``python benchmarks/bench_batcher.py`` (``--quick`` for a short run).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from genlm_core.runtime import AutoBatcher

CALLERS = (1, 64, 1024)


def zero_cost(keys: list[Any]) -> list[Any]:
    return keys


# -- genlm-backend 0.3.1 reference ---------------------------------------------------


def make_reference() -> Callable[[Any], Any] | None:
    """The 0.3.1 leader path (MLX backend's shape); None when genlm-backend is absent."""
    try:
        from genlm.backend.llm.base import AsyncLM, fail_futures
    except ImportError:
        return None

    class LeaderBatcher(AsyncLM):
        def __init__(self, batch_fn: Callable[[list[Any]], Sequence[Any]]) -> None:
            # AsyncLM.__init__ decodes a tokenizer's vocabulary; the leader protocol
            # only needs the two fields it initialises.
            self._batch_queue = []
            self._batch_armed = False
            self._batch_fn = batch_fn

        async def next_token_logprobs(self, token_ids: Any, lora_name: Any = None) -> Any:
            return await self.request(token_ids)

        def next_token_logprobs_sync(self, token_ids: Any, lora_name: Any = None) -> Any:
            return self._batch_fn([token_ids])[0]

        def _batch_evaluate(self, queries: list[tuple[Any, asyncio.Future]]) -> None:
            # genlm/backend/llm/mlx.py::_batch_evaluate, minus the cache and MLX.
            futures = defaultdict(list)
            for key, future in queries:
                futures[key].append(future)
            try:
                results = self._batch_fn(list(futures))
            except Exception as exc:
                fail_futures(queries, exc)
                raise
            for result, waiting in zip(results, futures.values(), strict=True):
                for future in waiting:
                    future.set_result(result)

        async def request(self, key: Any) -> Any:
            future = asyncio.get_running_loop().create_future()
            batch = await self._join_batch([(key, future)], timeout=0.0)
            if batch is not None:
                self._batch_evaluate(batch)
            return await future

    return LeaderBatcher


# -- the measurement -------------------------------------------------------------------


async def drive(submit: Callable[[Any], Any], n_callers: int, per_caller: int) -> float:
    async def caller(c: int) -> None:
        for i in range(per_caller):
            key = (c, i)
            if await submit(key) != key:
                raise AssertionError(f"wrong result for {key}")

    start = time.perf_counter()
    await asyncio.gather(*(caller(c) for c in range(n_callers)))
    return n_callers * per_caller / (time.perf_counter() - start)


async def run_ours(n_callers: int, per_caller: int, max_batch_size: int) -> float:
    batcher = AutoBatcher(zero_cost, max_batch_size=max_batch_size)
    try:
        return await drive(batcher.submit, n_callers, per_caller)
    finally:
        await batcher.aclose()


async def run_reference(cls: Any, n_callers: int, per_caller: int) -> float:
    return await drive(cls(zero_cost).request, n_callers, per_caller)


def medians(runs: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Median rate of each run; the runs take turns so they share the machine's load."""
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, make_run in runs.items():
            rates[name].append(asyncio.run(make_run()))
    return {name: statistics.median(r) for name, r in rates.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short run (~2k requests, 5 repeats)")
    parser.add_argument("--repeats", type=int, default=None, help="runs per figure (>= 5)")
    args = parser.parse_args()
    repeats = max(5, args.repeats or (5 if args.quick else 7))
    total = 2_048 if args.quick else 20_480
    reference = make_reference()

    print(f"AutoBatcher throughput, zero-cost batch_fn, median of {repeats} runs (requests/s)")
    header = f"{'callers':>7} {'req/caller':>10} {'ours bs=64':>12} {'ours bs=1024':>13}"
    header += f" {'0.3.1 leader':>13} {'ratio(64)':>10} {'ratio(1024)':>11}"
    print(header)
    for n in CALLERS:
        per = max(20, total // n)
        runs: dict[str, Callable[[], Any]] = {
            "ours64": lambda n=n, per=per: run_ours(n, per, 64),
            "ours1k": lambda n=n, per=per: run_ours(n, per, 1024),
        }
        if reference is not None:
            runs["ref"] = lambda n=n, per=per: run_reference(reference, n, per)
        m = medians(runs, repeats)
        line = f"{n:>7} {per:>10} {m['ours64']:>12,.0f} {m['ours1k']:>13,.0f}"
        if reference is not None:
            ref = m["ref"]
            line += f" {ref:>13,.0f} {m['ours64'] / ref:>9.2f}x {m['ours1k'] / ref:>10.2f}x"
        else:
            line += f" {'n/a':>13}"
        print(line, flush=True)
    if reference is None:
        print("genlm-backend is not installed: reference column skipped")
    print("ratio = ours / genlm-backend 0.3.1 (>1 means ours is faster); bs = max_batch_size")


if __name__ == "__main__":
    main()

"""What Qwen3's NFC normalizer costs ExactByteState: the same vocabulary with and without it.

Qwen3's tokenizer normalizes text to NFC first; the canonical filter then also keeps
the text NFC (genlm_bytelm/exact/canonical/nfc.py). This runs, in one process over
MockAsyncLM, Qwen3's tokenizer as it is and the same tokenizer with its normalizer
removed (the plain byte-level filter over the same 151k tokens), alternating:

* ``build``: the canonical filter (``canonical_filter``), once each;
* ``prefill``: ``ExactByteState.prefill`` of TEXT, then ``logp_next()``;
* ``per byte``: ``<< byte`` then ``logp_next()`` over TEXT, byte by byte.

Medians over ``--repeats``; the filter's per-context caches are emptied before each
repeat (tables kept, as after ``warm()``). Run ``python benchmarks/bench_nfc.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TEXT = (
    "The café's crème brûlée, naïve x\u0301 \u1e9b\u0323: \ud55c\uad6d\uc5b4 \u4e2d\u6587 12,345!\n"
    "  def f(x):\n      return x + 1\n"
).encode()


def _cold(canon) -> None:
    canon._next_cache.clear()
    canon._groups.clear()
    if canon.nfc_rule is not None:
        canon.nfc_rule._tokens._cache.clear()
        canon.nfc_rule._entries._cache.clear()


async def main(repeats: int) -> None:
    from transformers import AutoTokenizer

    from genlm_assets import tokenizer_dir
    from genlm_bytelm import ExactByteState
    from genlm_core.testing import MockAsyncLM

    path = str(tokenizer_dir("qwen3"))
    plain_tok = AutoTokenizer.from_pretrained(path)
    plain_tok.backend_tokenizer.normalizer = None
    nfc_tok = AutoTokenizer.from_pretrained(path)
    llms = {"nfc": MockAsyncLM(nfc_tok), "plain": MockAsyncLM(plain_tok)}
    print(f"Qwen3 over MockAsyncLM, {len(TEXT)} bytes; load {os.getloadavg()[0]:.2f}")
    states = {}
    for name, llm in llms.items():
        t0 = time.perf_counter()
        states[name] = await ExactByteState.initial(llm)
        built = time.perf_counter() - t0
        states[name].shared.canon.warm()
        print(f"  {name:5s} initial (filter build) {built:5.1f} s")
    times: dict[str, dict[str, list[float]]] = {n: {"prefill": [], "byte": []} for n in llms}
    for _ in range(repeats):
        for name, state in states.items():
            canon = state.shared.canon
            _cold(canon)
            t0 = time.perf_counter()
            await (await state.prefill(TEXT)).logp_next()
            times[name]["prefill"].append(time.perf_counter() - t0)
            _cold(canon)
            current = state
            for byte in TEXT:
                t0 = time.perf_counter()
                current = await (current << byte)
                await current.logp_next()
                times[name]["byte"].append(time.perf_counter() - t0)
    med = {n: {k: statistics.median(v) for k, v in d.items()} for n, d in times.items()}
    for name in llms:
        print(
            f"  {name:5s} prefill {med[name]['prefill']:6.3f} s, per byte "
            f"{med[name]['byte'] * 1e3:6.2f} ms (median of {repeats} / {repeats * len(TEXT)})"
        )
    print(
        f"  nfc / plain: prefill {med['nfc']['prefill'] / med['plain']['prefill']:.2f}x, "
        f"per byte {med['nfc']['byte'] / med['plain']['byte']:.2f}x; load "
        f"{os.getloadavg()[0]:.2f}"
    )
    for llm in llms.values():
        llm.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    asyncio.run(main(parser.parse_args().repeats))

"""decode_vocab: genlm-core vs genlm-backend 0.3.1, same tokenizer object, same run.

What is measured: the wall time of one ``decode_vocab(tokenizer)`` call (byte vocab +
str vocab, default ``byte2str_fallback="tokenizer"``), median over ``--repeats`` calls.
Bar: ours >= 2x faster on Llama-3 and Gemma-3; GPT-2, Qwen3 and cl100k are shown for
information (genlm-backend crashes on cl100k's holes, so it has no reference time).

Fairness:

* both sides get the same, already loaded tokenizer object; each call is a fresh call;
* calls alternate reference / ours (the first of each is an untimed warm-up), so load
  from other processes hits both alike;
* neither side keeps a per-tokenizer cache. Ours memoizes only two constant 256-entry
  tables (GPT-2's byte alphabet); we clear them before each of our calls anyway;
* ``gc.collect()`` runs before every call, so neither inherits the other's garbage.
  (Ours pauses the garbage collector while it builds the vocabulary: that is part of
  its design, and the one deferred collection it causes is inside its timed call.)

Every run checks that the byte strings and str vocab are identical wherever the
reference succeeds, and exits non-zero otherwise.

Run: ``python benchmarks/bench_decode_vocab.py`` (``--quick``: Llama-3 and Gemma-3 only,
3 repeats).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

BAR_TOKENIZERS = ("llama3", "gemma3")
INFO_TOKENIZERS = ("gpt2-npm", "qwen3", "cl100k")
BAR = 2.0


def _clear_our_tables() -> None:
    from genlm_core.tokenization.byte_level import bytes_to_unicode, gpt2_byte_table

    bytes_to_unicode.cache_clear()
    gpt2_byte_table.cache_clear()


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def bench_one(name: str, repeats: int) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from genlm_assets import tokenizer_dir
    from genlm_core.tokenization import decode_vocab

    try:
        from genlm.backend.tokenization import decode_vocab as reference
    except ImportError:  # pragma: no cover - genlm-backend is a dev dependency
        reference = None

    tok = AutoTokenizer.from_pretrained(tokenizer_dir(name))

    def ours() -> Any:
        _clear_our_tables()
        return decode_vocab(tok)

    ours_times: list[float] = []
    ref_times: list[float] = []
    ref_error = None if reference is not None else "genlm-backend not installed"
    ours_result = ref_result = None
    for i in range(repeats + 1):  # round 0 is the warm-up
        if ref_error is None:
            try:
                elapsed, ref_result = _timed(lambda: reference(tok))
            except Exception as exc:  # noqa: BLE001 - reported, not hidden
                ref_error = f"{type(exc).__name__}: {exc}"
            else:
                if i:
                    ref_times.append(elapsed)
        elapsed, ours_result = _timed(ours)
        if i:
            ours_times.append(elapsed)

    byte_vocab, str_vocab = ours_result
    identical: bool | None = None
    if ref_error is None:
        ref_bytes, ref_strs = ref_result
        identical = [t.byte_string for t in byte_vocab] == [
            t.byte_string for t in ref_bytes
        ] and str_vocab == ref_strs
    return {
        "name": name,
        "tokens": len(byte_vocab),
        "ours": statistics.median(ours_times),
        "ref": statistics.median(ref_times) if ref_times else None,
        "ref_error": ref_error,
        "identical": identical,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="bar tokenizers, 3 repeats")
    parser.add_argument("--repeats", type=int, default=None, help="timed calls per side")
    args = parser.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 7)
    names = BAR_TOKENIZERS if args.quick else BAR_TOKENIZERS + INFO_TOKENIZERS

    print(f"decode_vocab, median of {repeats} calls per side (alternating), seconds")
    header = (
        f"{'tokenizer':<10} {'tokens':>8} {'genlm-core':>11} {'genlm-backend':>14} "
        f"{'speedup':>8}  identical"
    )
    print(header)
    print("-" * len(header))
    rows = []
    for name in names:
        row = bench_one(name, repeats)
        rows.append(row)
        ref = "crashes" if row["ref"] is None else f"{row['ref']:.3f}"
        ratio = "-" if row["ref"] is None else f"{row['ref'] / row['ours']:.1f}x"
        same = {True: "yes", False: "NO", None: "n/a"}[row["identical"]]
        print(
            f"{name:<10} {row['tokens']:>8} {row['ours']:>11.3f} {ref:>14} {ratio:>8}  {same}",
            flush=True,
        )
        if row["ref_error"]:
            print(f"           genlm-backend: {row['ref_error'][:100]}")

    failed = [r["name"] for r in rows if r["identical"] is False]
    bar_rows = [r for r in rows if r["name"] in BAR_TOKENIZERS and r["ref"] is not None]
    below = [r["name"] for r in bar_rows if r["ref"] / r["ours"] < BAR]
    print()
    verdict = f"MISSED on {', '.join(below)}" if below else "met"
    print(f"bar (>= {BAR:.0f}x on {', '.join(BAR_TOKENIZERS)}): {verdict}")
    if failed:
        print(f"byte strings or str vocab DIFFER from genlm-backend on: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

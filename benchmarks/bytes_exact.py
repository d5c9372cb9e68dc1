"""ExactByteState: its speed races (for bench_bytes.py) and the figures in docs/reports/bytes.md.

Races, same model object and run as bench_bytes.py (SmolLM2-135M-Instruct fp32, hf):

* ``prefill`` of the 219-byte text: ExactByteState against our ByteBeamState
  (K=4, prune_threshold=0.05; bar >= 1.0x) and genlm-bytes 0.2.0 (same parameters);
* ``greedy`` 64 bytes after that text (prefill not timed): against our unpruned
  ByteBeamState(K=64, prune_threshold=0) (bar >= 5x), the K=4 beam and genlm-bytes;
  with model calls (forwards, rows) per byte, candidates per step, the share of time
  inside the model's forward, and ExactByteState without speculation.

Each race prints a *floor*: the K=4 beam's whole time over the time the exact state's
forwards alone took, the ratio it would reach if its own work (masks, tries, plans) cost
nothing.

Figures (``python benchmarks/bytes_exact.py tv|bpb|rules``):

* ``tv``: total variation between ExactByteState and ByteBeamState(K=64,
  prune_threshold=0) at points of English, code and UTF-8 texts (the model's mass on
  non-canonical tokenizations), with the other beam settings of docs/bytes.md's table;
* ``bpb``: bits per byte of a paragraph, exact against the beam's estimates;
* ``rules``: the adjacent-pair rule against the tokenizer's encoder on random strings.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import os
import statistics
import sys
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
from _caller_threads import as_alone  # noqa: E402

MODEL = "smollm2-135m-instruct"
K64 = {"K": 64, "prune_threshold": 0.0, "heal": True}


def load(dtype: Any = None) -> tuple[Any, Any]:
    """SmolLM2's transformers model (fp32) and tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from genlm_assets import model_dir

    path = str(model_dir(MODEL))
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype or torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(path)


class Contender:
    """One byte-level LM of the race over its own AsyncTransformer (own caches).

    ``library`` is bench_bytes.Library: the K=4 beams (ours and genlm-bytes) are its.
    """

    def __init__(self, kind: str, hf_model: Any, tokenizer: Any, library: Any) -> None:
        self.kind = kind
        self.lib = None
        if kind in ("genlm-bytes", "beam K=4"):
            self.lib = library("ref" if kind == "genlm-bytes" else "ours", hf_model, tokenizer)
            self.lm = self.lib.lm
        else:
            from genlm_hf.lm import AsyncTransformer

            self.lm = AsyncTransformer(hf_model, tokenizer)

    async def start(self) -> Any:
        """A fresh initial state (tries and the canonical filter are built once, not timed)."""
        if self.lib is not None:
            return await self.lib.beam()
        if self.kind.startswith("exact"):
            from genlm_bytelm import ExactByteState

            return await ExactByteState.initial(self.lm, speculate=self.kind == "exact")
        from genlm_bytelm import BeamParams, ByteBeamState

        return await ByteBeamState.initial(self.lm, BeamParams(**K64))

    def clear(self) -> None:
        import gc

        self.lm.clear_cache()
        gc.collect()


async def prefill_run(c: Contender, clock: Any, text: bytes) -> dict[str, Any]:
    state = await c.start()
    clock.reset()
    t0 = time.perf_counter()
    await state.prefill(text)
    seconds = time.perf_counter() - t0
    n, rows, inside = clock.summary()
    return {"s": seconds, "forwards": n, "rows": rows * n, "inside": inside}


async def greedy_run(c: Contender, clock: Any, text: bytes, steps: int) -> dict[str, Any]:
    """Greedy bytes after ``text`` (prefill not timed); candidates counted at each step."""
    from genlm_bytelm import EOS

    state = await (await c.start()).prefill(text)
    clock.reset()
    counts, out = [], bytearray()
    t0 = time.perf_counter()
    for _ in range(steps):
        b = (await state.logp_next()).materialize().argmax()  # genlm-bytes' has no argmax()
        if b is None or b == EOS:
            break
        counts.append(len(state.states))
        state = await (state.prune() << b)
        out.append(b)
    seconds = time.perf_counter() - t0
    n, rows, inside = clock.summary()
    return {
        "s": seconds,
        "forwards": n,
        "rows": rows * n,
        "inside": inside,
        "bytes": bytes(out),
        "cands": counts,
    }


def race(contenders: list[Contender], repeats: int, run: Any) -> dict[str, list[dict]]:
    """``run(contender)`` for each, alternating the order, ``repeats`` times."""
    results: dict[str, list[dict]] = {c.kind: [] for c in contenders}
    for r in range(repeats):
        for c in contenders if r % 2 == 0 else contenders[::-1]:
            c.clear()
            as_alone(c.lm)
            res = asyncio.run(run(c))
            results[c.kind].append(res)
            print(
                f"  repeat {r} {c.kind:18s}: {res['s']:7.3f} s, {res['forwards']:4d} forwards, "
                f"{res['rows']:5.0f} rows, {res['inside']:6.3f} s inside",
                flush=True,
            )
    return results


def median(results: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in results)


def floor(res: dict[str, list[dict]]) -> float:
    """The K=4 beam's time over the exact state's forwards alone (printed, and returned)."""
    value = median(res["beam K=4"], "s") / median(res["exact"], "inside")
    print(f"  floor: the K=4 beam's time over the exact state's forwards alone: {value:.2f}x")
    return value


def exact_races(
    hf_model: Any, tokenizer: Any, clock: Any, repeats: int, quick: bool, text: bytes, library: Any
):
    """The prefill and greedy races of ExactByteState (see module doc); returns the ratios."""
    ratios = {}
    kinds = ["exact", "beam K=4", "genlm-bytes"]
    contenders = {
        k: Contender(k, hf_model, tokenizer, library) for k in [*kinds, "beam K=64", "exact-nospec"]
    }
    for c in contenders.values():  # warm-up: tries, filter tables, kernels (excluded)
        asyncio.run(prefill_run(c, clock, text[:40]))
    tables = asyncio.run(contenders["exact"].start()).shared.canon.warm()
    print(f"canonical filter: {tables} pre-token tables built before timing")
    print(f"\n== exact prefill: {len(text)} bytes, {MODEL} ==")
    res = race([contenders[k] for k in kinds], repeats, lambda c: prefill_run(c, clock, text))
    exact = median(res["exact"], "s")
    for k in kinds[1:]:
        r = median(res[k], "s") / exact
        ratios[f"prefill vs {k}"] = r
        print(
            f"  ExactByteState prefill {len(text) / exact:7.1f} bytes/s, {k} "
            f"{len(text) / median(res[k], 's'):7.1f} bytes/s: {r:.2f}x"
            + (f" (bar >= 1.0x: {'PASS' if r >= 1.0 else 'FAIL'})" if k == "beam K=4" else "")
        )
    ratios["prefill floor vs beam K=4"] = floor(res)
    print(
        f"  forwards: exact {median(res['exact'], 'forwards'):.0f}, beam K=4 "
        f"{median(res['beam K=4'], 'forwards'):.0f}, genlm-bytes "
        f"{median(res['genlm-bytes'], 'forwards'):.0f}"
    )
    steps = 16 if quick else 64
    print(f"\n== exact greedy: {steps} bytes after the {len(text)}-byte text ==")
    order = ["exact", "exact-nospec", "beam K=4", "genlm-bytes", "beam K=64"]
    res = race([contenders[k] for k in order], repeats, lambda c: greedy_run(c, clock, text, steps))
    exact = median(res["exact"], "s")
    for k in order[1:]:
        r = median(res[k], "s") / exact
        ratios[f"greedy vs {k}"] = r
        bar = f" (bar >= 5x: {'PASS' if r >= 5 else 'FAIL'})" if k == "beam K=64" else ""
        print(
            f"  ExactByteState {steps / exact:6.1f} bytes/s, {k} {steps / median(res[k], 's'):6.1f}"
            f" bytes/s: {r:.2f}x{bar}"
        )
    for k in order:
        rs = res[k]
        cands = [n for r in rs for n in r["cands"]]
        n = len(rs[0]["bytes"]) or 1
        print(
            f"  {k:14s}: {median(rs, 'forwards') / n:.2f} forwards/byte "
            f"({median(rs, 'rows') / n:.2f} rows/byte), candidates mean {np.mean(cands):.1f} "
            f"max {max(cands)}, {median(rs, 'inside') / median(rs, 's'):.0%} of wall in forward"
        )
    ratios["greedy floor vs beam K=4"] = floor(res)
    same = len({r[-1]["bytes"] for r in res.values()}) == 1
    print(f"  same bytes generated by all: {same} ({res['exact'][-1]['bytes'][:40]!r}...)")
    for c in contenders.values():
        c.lm.cleanup() if hasattr(c.lm, "cleanup") else None
    return ratios


# -- docs figures ------------------------------------------------------------------------


TEXTS = {
    "English": b"The history of the city dates back to the Roman period, when a small settlement "
    b"grew up around a bridge over the river.",
    "code": b"def mean(xs):\n    if not xs:\n        raise ValueError('empty')\n"
    b"    return sum(xs) / len(xs)\n",
    "UTF-8": "Le café coûte 3 € à Zürich ; 東京は雨です。Привет, мир! 😀 naïve".encode(),
}
POINTS = 5


async def tv_figures() -> None:
    """TV of every setting against K=64, the exact state's included (docs table rows)."""
    from genlm_assets import model_dir
    from genlm_bytelm import BeamParams, ByteBeamState, ExactByteState
    from genlm_core import load_model_by_name

    llm = load_model_by_name(str(model_dir(MODEL)), backend="hf")
    eos = [bytes(llm.byte_vocab[llm.tokenizer.eos_token_id])]

    async def points(make: Any) -> tuple[dict[str, list[np.ndarray]], float]:
        out, seconds, n = {}, 0.0, 0
        for name, text in TEXTS.items():
            llm.clear_cache()
            state = await make()
            cuts = [len(text) * (i + 1) // POINTS for i in range(POINTS)]
            done, out[name] = 0, []
            for cut in cuts:
                t0 = time.perf_counter()
                state = await state.prefill(text[done:cut])
                seconds += time.perf_counter() - t0
                n, done = n + cut - done, cut
                out[name].append((await state.logp_next()).ps.copy())
        return out, seconds / n

    def beam(k: int, threshold: float) -> Any:
        return lambda: ByteBeamState.initial(
            llm, BeamParams(K=k, prune_threshold=threshold, eos_byte_strings=eos)
        )

    reference, ref_speed = await points(beam(64, 0.0))
    rows = [("exact", lambda: ExactByteState.initial(llm, eos_byte_strings=eos))]
    rows += [(f"K={k}, {t:g}", beam(k, t)) for k, t in [(16, 0.0), (4, 0.0), (4, 0.05)]]
    print(f"K=64 (reference): {ref_speed:.3f} s/byte (prefill)")
    for label, make in rows:
        got, speed = await points(make)
        for name in TEXTS:
            tv = [
                0.5 * np.abs(np.exp(a) - np.exp(b)).sum()
                for a, b in zip(reference[name], got[name], strict=True)
            ]
            err = max(
                float(np.abs(a - b)[np.exp(a) >= 1e-3].max())
                for a, b in zip(reference[name], got[name], strict=True)
            )
            print(
                f"| {label} | {name} | {np.mean(tv):.2e} | {max(tv):.2e} | {err:.2e} |", flush=True
            )
        print(f"  {label}: {speed:.3f} s/byte (prefill)")
    llm.cleanup()


async def bpb_figures() -> None:
    """Bits per byte of the docs' paragraph: exact, and the beams' estimates."""
    from genlm_assets import model_dir
    from genlm_bytelm import BeamParams, ByteBeamState, log_likelihood
    from genlm_core import load_model_by_name

    llm = load_model_by_name(str(model_dir(MODEL)), backend="hf")
    text = TEXTS["English"] + b" During the Middle Ages it became an important market town."
    t0 = time.perf_counter()
    exact = await log_likelihood(llm, text)
    print(
        f"exact: {exact.bits_per_byte:.4f} bits/byte ({exact.logprob:.3f} nats, "
        f"{time.perf_counter() - t0:.2f} s)"
    )
    for k, t in [(64, 0.0), (4, 0.0), (4, 0.05), (1, 0.0)]:
        t0 = time.perf_counter()
        beam = await (await ByteBeamState.initial(llm, BeamParams(K=k, prune_threshold=t))).prefill(
            text
        )
        bpb = -beam.logZ / (len(text) * math.log(2))
        print(
            f"beam K={k}, prune {t:g}: {bpb:.4f} bits/byte ({beam.logZ:.3f} nats, "
            f"{time.perf_counter() - t0:.2f} s)"
        )
    llm.cleanup()


def rule_figures(n: int) -> None:
    """The adjacent-pair rule and ours against the encoder, on random strings."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "shared"))
    import random

    from byte_oracle import ByteOracle
    from transformers import AutoTokenizer

    from genlm_assets import model_dir, tokenizer_dir
    from genlm_bytelm.exact.canonical import EMPTY, CanonicalFilter
    from genlm_core.tokenization import decode_vocab

    alphabet = list("ab cdeA1 23 .,!'\n\t-s") + ["é", "中", "文", "😀", " ", "  ", "\n\n", "'s"]
    alphabet += ["'ll", "123456", "\u00a0", "x'A", ".A", "\r\n"]
    for name, path in [
        ("GPT-2", model_dir("tiny-gpt2")),
        ("Llama-3", model_dir("tiny-llama3")),
        ("SmolLM2", model_dir(MODEL)),
        ("cl100k", tokenizer_dir("cl100k")),
    ]:
        tok = AutoTokenizer.from_pretrained(str(path))
        canon = CanonicalFilter(tok, decode_vocab(tok)[0])
        oracle = ByteOracle(None, tok)
        rng = random.Random(0)
        rejected, accepted_extra, total, examples, extras = 0, 0, 0, [], []
        for _ in range(n):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8)))
            ids = tuple(oracle.encoder.encode(text, add_special_tokens=False).ids)
            if not all(_pair(oracle, canon, a, c) for a, c in zip(ids, ids[1:], strict=False)):
                rejected += 1
                if len(examples) < 4:
                    examples.append(text)
            for other in itertools.islice(oracle._tokenizations(text.encode(), False, ()), 50):
                if other == ids:
                    continue
                total += 1
                if all(_pair(oracle, canon, a, c) for a, c in zip(other, other[1:], strict=False)):
                    accepted_extra += 1
                    if len(extras) < 4:
                        extras.append([oracle.vocab[t] for t in other])
        ours_rejected = 0
        for _ in range(n):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8)))
            pending = EMPTY
            for t in oracle.encoder.encode(text, add_special_tokens=False).ids:
                if not canon.valid_next(pending, t):
                    ours_rejected += 1
                    break
                pending = canon.extend(pending, t)
        print(
            f"{name}: pair rule rejects the encoding of {rejected}/{n} strings "
            f"(e.g. {examples}); accepts {accepted_extra}/{total} other tokenizations as whole "
            f"texts (e.g. {extras}); our rule rejects the encoding of {ours_rejected}/{n}"
        )


def _pair(oracle: Any, canon: Any, a: int, c: int) -> bool:
    data = oracle.vocab[a] + oracle.vocab[c]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return canon.pairs.merges_only([a, c])
    return oracle.encoder.encode(text, add_special_tokens=False).ids == [a, c]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("figure", choices=["tv", "bpb", "rules"])
    parser.add_argument("--strings", type=int, default=2000, help="random strings (rules)")
    args = parser.parse_args()
    if args.figure == "tv":
        asyncio.run(tv_figures())
    elif args.figure == "bpb":
        asyncio.run(bpb_figures())
    else:
        rule_figures(args.strings)


if __name__ == "__main__":
    main()

"""Byte-level generation from SmolLM2: what token-level generation cannot do simply.

1. **A prompt that ends mid-word.** ``"The capital of Fra"`` tokenizes as ``... Fra``,
   a token the model rarely saw before ``nce``; a token-level sampler continues from
   that odd boundary. The byte beam sums over tokenizations (``Fr|ance``,
   ``France``, ...) and heals the token, so it reads on as if the word were whole.
2. **A constraint on bytes.** A lipogram: no letter ``e`` anywhere. Masking tokens
   that contain an ``e`` is not enough to get the right distribution (a word can be
   spelled by many tokenizations, some of them split around letters), while at the
   byte level the constraint is one line: zero the two bytes, renormalise.

Each line prints the text and its log-probability under the byte-level model.

3. **Exact, beside the beam.** SmolLM2's tokenizer is byte-level BPE, so
   ``ExactByteState`` computes the same byte-level distribution with no beam: every
   canonical tokenization of the prompt is kept (``Fr|ance`` inside ``" Fra"``
   included: healing by construction). Both read the mid-word prompt; the demo prints
   their next-byte top 3, greedy continuations and ``log P(prompt)``, then the exact
   bits per byte of a paragraph against the beam's estimate (``log_likelihood``).

Run:  python examples/bytes_demo.py          (nox -s demo-bytes installs and runs it)
      python examples/bytes_demo.py --model DIR   (a local Hugging Face model, or a hub id)
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import time

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from genlm_bytelm import (  # noqa: E402
    BeamParams,
    ByteBeamState,
    ExactByteState,
    log_likelihood,
)
from genlm_core import load_model_by_name  # noqa: E402


async def generate(beam, steps: int, banned: bytes = b"") -> tuple[bytes, float]:
    """Greedy bytes from ``beam``, never one of ``banned``; return them and their log-prob.

    The log-probability is the model's, conditioned on the constraint: each byte's
    probability renormalised over the allowed bytes.
    """
    out, logp = bytearray(), 0.0
    for _ in range(steps):
        probs = (await beam.logp_next()).ps.copy()
        probs[list(banned)] = -np.inf
        probs[256:] = -np.inf  # end of token / sequence: keep writing
        allowed = np.logaddexp.reduce(probs)
        b = int(np.argmax(probs))
        logp += float(probs[b] - allowed)
        out.append(b)
        beam = await (beam.prune() << b)
    return bytes(out), logp


async def main(model: str, steps: int) -> None:
    t0 = time.perf_counter()
    llm = load_model_by_name(model, backend="hf")
    params = BeamParams(K=4, prune_threshold=0.05)
    start = await ByteBeamState.initial(llm, params)
    print(f"{model} loaded in {time.perf_counter() - t0:.1f} s; beam {params}\n")

    for prompt, banned, label in [
        (b"The capital of Fra", b"", "mid-word prompt"),
        (b"The capital of France", b"", "whole word     "),
        (b"A story about a cat: ", b"", "no constraint  "),
        (b"A story about a cat: ", b"eE", "lipogram, no e "),
    ]:
        t = time.perf_counter()
        beam = await start.prefill(prompt)
        prompt_logp = beam.logZ  # log-probability of the prompt's bytes
        text, logp = await generate(beam, steps, banned)
        print(
            f"[{label}] {prompt.decode()!s}|{text.decode(errors='replace')!s}\n"
            f"    log P(prompt) = {prompt_logp:7.2f}, log P(continuation | prompt"
            f"{', no ' + banned[:1].decode() if banned else ''}) = {logp:7.2f} "
            f"(per byte {logp / steps:5.2f}, perplexity {math.exp(-logp / steps):4.2f}); "
            f"{time.perf_counter() - t:.1f} s"
        )
        assert not set(text) & set(banned)
    await exact_beside_beam(llm, start, steps)
    stats = llm.output_cache_info()
    print(f"\noutput cache: {stats['entries']} log-prob rows; K/V cache: {llm.kv_cache_stats}")
    llm.cleanup()


async def exact_beside_beam(llm, beam_start, steps: int) -> None:
    """The mid-word prompt read exactly and by the beam; bits per byte of a paragraph."""
    t = time.perf_counter()
    exact_start = await ExactByteState.initial(llm)
    print(f"\nExactByteState (no beam) ready in {time.perf_counter() - t:.1f} s")
    prompt = b"The capital of Fra"
    for label, start in [("exact", exact_start), ("beam ", beam_start)]:
        t = time.perf_counter()
        state = await start.prefill(prompt)
        top = (await state.logp_next()).pretty().top(3)
        text = await state.greedy(b"", steps // 2)
        shown = ", ".join(f"{k!r}: {v:.3f}" for k, v in top.items())
        print(
            f"[{label}] {prompt.decode()}|{text.decode(errors='replace')}\n"
            f"    next byte top 3: {shown}; log P(prompt) = {state.logZ:.4f}; "
            f"{time.perf_counter() - t:.1f} s"
        )
    paragraph = (
        b"The history of the city dates back to the Roman period, when a small settlement "
        b"grew up around a bridge over the river."
    )
    exact = await log_likelihood(llm, paragraph)
    beam = await beam_start.prefill(paragraph)
    estimate = -beam.logZ / (len(paragraph) * math.log(2))
    print(
        f"bits per byte of a {len(paragraph)}-byte paragraph: exact {exact.bits_per_byte:.4f}, "
        f"beam estimate {estimate:.4f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct", help="model (default: SmolLM2)")
    parser.add_argument("--steps", type=int, default=48, help="bytes to generate per line")
    args = parser.parse_args()
    asyncio.run(main(args.model, args.steps))

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

from genlm_core import load_model_by_name  # noqa: E402
from genlm_core.bytes import BeamParams, ByteBeamState  # noqa: E402


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
    stats = llm.output_cache_info()
    print(f"\noutput cache: {stats['entries']} log-prob rows; K/V cache: {llm.kv_cache_stats}")
    llm.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct", help="model (default: SmolLM2)")
    parser.add_argument("--steps", type=int, default=48, help="bytes to generate per line")
    args = parser.parse_args()
    asyncio.run(main(args.model, args.steps))

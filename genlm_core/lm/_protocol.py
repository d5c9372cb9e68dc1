"""AsyncLM: what clients may rely on from any genlm language model (a Protocol)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import torch

from genlm_core.tokenization import Token


@runtime_checkable
class AsyncLM(Protocol):
    """What clients may rely on from any genlm language model."""

    tokenizer: Any
    byte_vocab: list[Token]
    str_vocab: list[str]

    async def next_token_logprobs(
        self, token_ids: Sequence[int], lora_name: str | None = None
    ) -> torch.Tensor:
        """Log-probabilities of the next token after ``token_ids``."""
        ...

    def next_token_logprobs_sync(
        self, token_ids: Sequence[int], lora_name: str | None = None
    ) -> torch.Tensor:
        """Synchronous [`next_token_logprobs`][]."""
        ...

    async def batch_next_token_logprobs(
        self, token_ids_list: Sequence[Sequence[int]], lora_name: str | None = None
    ) -> torch.Tensor:
        """Stacked log-probabilities for several prompts."""
        ...

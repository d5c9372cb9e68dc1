"""A minimal AsyncLM over a transformers causal LM, in float64 (a third-party backend).

The core test session installs no backend plugin; this is enough to run the byte-level
LMs on the tiny test models: one full forward per context (cached), log-probabilities in
float64 so that comparisons with the brute-force oracle can be held to 1e-6.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from genlm_core.lm import AsyncLMBase


class Float64TorchLM(AsyncLMBase):
    """``next_token_logprobs`` by one float64 forward of the whole context.

    Args:
        model: A transformers causal LM (converted to float64 here).
        tokenizer: Its tokenizer.
    """

    def __init__(self, model: Any, tokenizer: Any) -> None:
        width = model.get_output_embeddings().weight.shape[0]
        super().__init__(tokenizer, vocab_size=width)
        self.model = model.to(torch.float64).eval()
        self._cache: dict[tuple[int, ...], torch.Tensor] = {}
        self.forwards = 0  # contexts computed (cache misses)

    async def next_token_logprobs(self, token_ids: Sequence[int], lora_name: str | None = None):
        return self.next_token_logprobs_sync(token_ids, lora_name)

    def next_token_logprobs_sync(self, token_ids: Sequence[int], lora_name: str | None = None):
        key = self.validate_token_ids(token_ids)
        row = self._cache.get(key)
        if row is None:
            self.forwards += 1
            with torch.no_grad():
                logits = self.model(input_ids=torch.tensor([list(key)])).logits[0, -1]
            row = self._cache[key] = torch.log_softmax(logits.to(torch.float64), -1)
        return row

    def clear_cache(self) -> None:
        self._cache.clear()

"""A byte bigram model: exact log-probabilities, batched and cached by genlm-core."""

from itertools import pairwise

import torch

from genlm_core import BatchedAsyncLM
from genlm_core.testing import ByteTokenizer


def bigram_table(text: bytes, n: int) -> torch.Tensor:
    """Add-one smoothed log-probabilities of each byte after each byte of ``text``."""
    counts = torch.ones(n, n)
    for a, b in pairwise(text):
        counts[a, b] += 1
    return (counts / counts.sum(dim=1, keepdim=True)).log()


class BigramLM(BatchedAsyncLM):
    """Add-one smoothed byte bigrams counted on a training text."""

    def __init__(self, text: bytes, **kwargs):
        super().__init__(ByteTokenizer(), **kwargs)
        self.table = bigram_table(text, len(self.byte_vocab))  # 256 bytes + <|endoftext|>

    @classmethod
    def from_name(cls, model_name: str, **opts):
        """The "model name" is the training text."""
        return cls(model_name.encode(), **opts)

    def compute_batch(self, requests):
        """One row of the table per request: it depends only on the last token."""
        return [self.table[r.token_ids[-1]].clone() for r in requests]

"""Fixtures of the byte-level LM tests."""

from __future__ import annotations

import pytest
import torch

from genlm_core.tokenization import Token
from genlm_core.trie import TokenByteTrie


@pytest.fixture(scope="session", autouse=True)
def compiled_trie_kernels():
    """Compile the numba trie kernels once, before hypothesis times any example."""
    trie = TokenByteTrie([Token(0, b"a"), Token(1, b"ab")])
    trie.weight_sum(torch.tensor([0.5, 0.5]))
    trie.weight_max(torch.tensor([0.5, 0.5]))

"""Fixtures of the byte-level LM tests."""

from __future__ import annotations

import pytest
import torch
from asset_tokenizers import asset_tokenizer
from transformers import AutoTokenizer

from genlm_core.testing import MockAsyncLM
from genlm_core.testing.assets import tokenizer_dir
from genlm_core.tokenization import Token
from genlm_core.trie import TokenByteTrie


@pytest.fixture(scope="session", autouse=True)
def compiled_trie_kernels():
    """Compile the numba trie kernels once, before hypothesis times any example."""
    trie = TokenByteTrie([Token(0, b"a"), Token(1, b"ab")])
    trie.weight_sum(torch.tensor([0.5, 0.5]))
    trie.weight_max(torch.tensor([0.5, 0.5]))


@pytest.fixture(scope="session")
def tokenizer_of():
    """``tokenizer_of(name)``: the asset tokenizer ``name``, loaded once per session (shared)."""
    return asset_tokenizer


@pytest.fixture(scope="module")
def llm():
    """MockAsyncLM over GPT-2's tokenizer: pseudo-random, many tokenizations per text."""
    model = MockAsyncLM(AutoTokenizer.from_pretrained(tokenizer_dir("gpt2-npm")), temperature=0.3)
    yield model
    model.cleanup()


@pytest.fixture(scope="module")
def eos(llm):
    """The EOS byte strings of ``llm``: its tokenizer's EOS token."""
    return [bytes(llm.byte_vocab[llm.tokenizer.eos_token_id])]

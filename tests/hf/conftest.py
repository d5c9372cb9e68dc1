"""Shared fixtures of the genlm-hf tests: models loaded once per session.

Loading weights and decoding a vocabulary are the slow parts of building an
``AsyncTransformer``, so the Hugging Face model, its tokenizer and its decoded byte
vocabulary are session-scoped; each test gets a fresh ``AsyncTransformer`` around them
(its caches, batcher and lifecycle are per test). Tests that change the model
(LoRA adapters) load their own copy.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
from session_requires import require

os.environ.setdefault("HF_HUB_OFFLINE", "1")

require("genlm_hf.lm", reason="genlm-hf is not installed (nox -s hf installs it)")

import torch  # noqa: E402

from genlm_core.tokenization import decode_vocab  # noqa: E402
from genlm_hf.lm import AsyncTransformer  # noqa: E402

#: Asset name of each test model (genlm_assets).
MODELS = {
    "tiny-gpt2": "tiny-gpt2",  # GPT-2: absolute position embeddings
    "tiny-llama3": "tiny-llama3",  # Llama: rotary, Llama-3 vocabulary (128k)
    "smollm2": "smollm2-135m-instruct",  # real Llama-architecture model, 135M
}


class Loaded:
    """A loaded HF model with its tokenizer and decoded vocabulary."""

    def __init__(self, path: str) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.path = path
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        self.model.eval()
        width = self.model.get_output_embeddings().weight.shape[0]
        self.byte_vocab = decode_vocab(self.tokenizer, vocab_size=width)

    def lm(self, **opts: Any) -> AsyncTransformer:
        """A fresh AsyncTransformer around the shared model."""
        return AsyncTransformer(self.model, self.tokenizer, byte_vocab=self.byte_vocab, **opts)


@pytest.fixture(scope="session")
def hf_models(asset_model_dir: Callable[[str], Any]) -> Callable[[str], Loaded]:
    """``hf_models(key)``: the session's loaded model for a key of :data:`MODELS`."""
    loaded: dict[str, Loaded] = {}

    def get(key: str) -> Loaded:
        if key not in loaded:
            loaded[key] = Loaded(str(asset_model_dir(MODELS[key])))
        return loaded[key]

    return get


@pytest.fixture(scope="module")
def smollm2(hf_models):
    """A SmolLM2 AsyncTransformer for one test module (its caches shared by its tests)."""
    model = hf_models("smollm2").lm()
    yield model
    model.cleanup()


@pytest.fixture(scope="session")
def gpt2_tokenizer(asset_model_dir: Callable[[str], Any]) -> Any:
    """The tiny GPT-2's tokenizer: the vocabulary of the random-weight architecture models."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(asset_model_dir("tiny-gpt2")))

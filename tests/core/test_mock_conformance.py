"""The core runs the standard conformance suite against MockAsyncLM."""

import pytest

from genlm_core import load_model_by_name
from genlm_core.testing import AsyncLMConformance


class TestMockOverBytes(AsyncLMConformance):
    @pytest.fixture
    def lm(self):
        model = load_model_by_name("bytes", backend="mock")
        yield model
        model.cleanup()


class TestMockOverGPT2(AsyncLMConformance):
    @pytest.fixture(scope="class")
    def tokenizer(self, asset_tokenizer_dir):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(asset_tokenizer_dir("gpt2-npm"))

    @pytest.fixture
    def lm(self, tokenizer):
        from genlm_core.testing import MockAsyncLM

        model = MockAsyncLM(tokenizer, batch_size=4)  # small batches: requests span several
        yield model
        model.cleanup()

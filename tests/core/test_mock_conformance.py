"""The core runs the standard conformance suite against MockAsyncLM."""

import pytest

from genlm_core import load_model_by_name
from genlm_core.testing import AsyncLMConformance, LoraConformance


class TestMockOverBytes(AsyncLMConformance):
    @pytest.fixture
    def lm(self):
        model = load_model_by_name("bytes", backend="mock")
        yield model
        model.cleanup()


@pytest.fixture(scope="module")
def gpt2_tokenizer(tokenizer_of):
    return tokenizer_of("gpt2-npm")


class TestMockOverGPT2(AsyncLMConformance):
    @pytest.fixture
    def lm(self, gpt2_tokenizer):
        from genlm_core.testing import MockAsyncLM

        model = MockAsyncLM(gpt2_tokenizer, batch_size=4)  # small batches: requests span several
        yield model
        model.cleanup()


class TestMockAdapters(LoraConformance):
    """The mock's adapters: rows depend on the adapter file's content (its version)."""

    @pytest.fixture
    def lm(self, gpt2_tokenizer):
        from genlm_core.testing import MockAsyncLM

        model = MockAsyncLM(gpt2_tokenizer, batch_size=4)
        yield model
        model.cleanup()

    @pytest.fixture
    def lora_adapters(self, tmp_path):
        paths = []
        for version in (1, 2):
            path = tmp_path / f"adapter-v{version}"
            path.write_bytes(f"mock adapter weights, version {version}".encode())
            paths.append(str(path))
        return tuple(paths)

"""AsyncTransformer.from_name: local dirs, options passthrough, quantization, clear errors."""

from __future__ import annotations

import time
import warnings

import pytest
import torch
from session_requires import require

require("genlm_hf.lm", reason="genlm-hf is not installed")

from genlm_core import load_model_by_name  # noqa: E402
from genlm_core.errors import GenlmError, ModelNotFoundError  # noqa: E402
from genlm_hf.errors import ModelLoadError  # noqa: E402
from genlm_hf.lm import AsyncTransformer  # noqa: E402

PROMPT = [1, 2, 3, 4, 5]


@pytest.fixture(scope="module")
def gpt2_dir(asset_model_dir):
    return str(asset_model_dir("tiny-gpt2"))


def test_from_local_dir_cpu_defaults(gpt2_dir):
    lm = AsyncTransformer.from_name(gpt2_dir, batch_size=7)
    assert lm.batch_size == 7
    assert next(lm.model.parameters()).dtype == torch.float32
    assert lm.kv_reuse_off_reason == ""
    out = lm.next_token_logprobs_sync(PROMPT)
    torch.testing.assert_close(out, lm.next_token_logprobs_uncached(PROMPT), atol=1e-5, rtol=0)
    lm.cleanup()


def test_hf_opts_pass_through(gpt2_dir):
    lm = AsyncTransformer.from_name(gpt2_dir, hf_opts={"torch_dtype": torch.float64})
    assert next(lm.model.parameters()).dtype == torch.float64
    out = lm.next_token_logprobs_sync(PROMPT)
    assert out.dtype == torch.float32  # the contract's dtype, whatever the model's
    assert lm.kv_cache_stats.bytes == 5 * 2 * 2 * 64 * 8  # positions x K,V x layers x width x f64
    lm.cleanup()


def test_load_model_by_name_uses_hf(gpt2_dir):
    lm = load_model_by_name(gpt2_dir, backend="hf", llm_opts={"batch_size": 3})
    assert isinstance(lm, AsyncTransformer) and lm.batch_size == 3
    lm.cleanup()


def test_missing_directory_says_so(tmp_path):
    missing = str(tmp_path / "no-such-model")
    with pytest.raises(ModelNotFoundError, match="does not exist \\(no such directory") as info:
        AsyncTransformer.from_name(missing)
    assert isinstance(info.value, OSError) and isinstance(info.value, GenlmError)
    assert "Repo id" not in str(info.value)


def test_hub_name_offline_fails_at_once_with_the_fix(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    with pytest.raises(ModelNotFoundError, match="HF_HUB_OFFLINE is set") as info:
        load_model_by_name("openai-community/gpt2", backend="hf")
    assert time.monotonic() - start < 5
    assert "load_model_by_name('smollm2-135m-instruct')" in str(info.value)


def test_embedded_model_by_its_short_name(asset_model_dir):
    lm = load_model_by_name("tiny-gpt2", backend="hf")
    by_path = AsyncTransformer.from_name(str(asset_model_dir("tiny-gpt2")))
    assert torch.equal(
        lm.next_token_logprobs_sync(PROMPT), by_path.next_token_logprobs_sync(PROMPT)
    )
    lm.cleanup()
    by_path.cleanup()


def test_directory_without_a_model_is_a_clear_error(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelLoadError, match="tokenizer of .*empty") as info:
        AsyncTransformer.from_name(str(empty))
    assert "local directory" in str(info.value)


def test_tokenizer_without_weights_is_a_clear_error(asset_tokenizer_dir):
    tok_only = str(asset_tokenizer_dir("gpt2-npm"))
    with pytest.raises(ModelLoadError, match="could not load the model of"):
        AsyncTransformer.from_name(tok_only)


@pytest.mark.parametrize(
    "opts, layer",
    [
        ({"load_in_8bit": True}, "Linear8bitLt"),
        ({"load_in_4bit": True, "bnb_4bit_compute_dtype": torch.float32}, "Linear4bit"),
    ],
    ids=["8bit", "4bit"],
)
def test_bitsandbytes_on_cpu(asset_model_dir, opts, layer):
    """bitsandbytes >= 0.48 runs 8- and 4-bit layers on CPU; the options reach transformers."""
    require("bitsandbytes", reason="bitsandbytes is not installed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lm = AsyncTransformer.from_name(str(asset_model_dir("tiny-llama3")), bitsandbytes_opts=opts)
        assert type(lm.model.model.layers[0].self_attn.q_proj).__name__ == layer
        for ids in (PROMPT, PROMPT + [6, 7]):  # the second reuses the first's K/V
            out = lm.next_token_logprobs_sync(ids)
            ref = lm.next_token_logprobs_uncached(ids)
            torch.testing.assert_close(out, ref, atol=1e-4, rtol=0)
    assert lm.kv_cache_stats.hits == 1
    lm.cleanup()


@pytest.mark.cuda
def test_bitsandbytes_4bit_on_cuda(asset_model_dir):
    """NF4 weights with bf16 compute on a GPU, placed by device_map="auto"; prefix reuse exact.

    On tiny-llama3 (a real model's weights do not travel to a lent GPU without network):
    the quantized model's cached rows equal its own plain forwards within two bfloat16
    ulps of these logits (below 1 in magnitude), and the rows stay on the GPU.
    """
    require("bitsandbytes", reason="bitsandbytes is not installed")
    lm = AsyncTransformer.from_name(
        str(asset_model_dir("tiny-llama3")),
        bitsandbytes_opts={
            "load_in_4bit": True,
            "bnb_4bit_quant_type": "nf4",
            "bnb_4bit_compute_dtype": torch.bfloat16,
        },
    )
    assert lm.model.device.type == "cuda"
    assert type(lm.model.model.layers[0].self_attn.q_proj).__name__ == "Linear4bit"
    for ids in (PROMPT, PROMPT + [6, 7]):  # the second reuses the first's K/V
        out = lm.next_token_logprobs_sync(ids)
        assert out.device == lm.row_device and out.dtype == torch.float32
        ref = lm.next_token_logprobs_uncached(ids)
        torch.testing.assert_close(out, ref, atol=2 * 2**-7, rtol=0)
    assert lm.kv_cache_stats.hits == 1
    lm.cleanup()

"""Shared fixtures of the genlm-vllm tests: one vLLM engine per model for the session.

An engine takes ~15 s to start (it spawns its engine-core process), so each model's
``vllm.LLM`` is session-scoped and every test wraps it in a fresh
:class:`~genlm_vllm.lm.AsyncVirtualLM` with ``owns_engine=False`` (own batcher, cache,
LoRA table, lifecycle). Tests of engine shutdown start their own engine.

The engines run with ``max_num_seqs=4``, so any batch of more than four requests is
split by vLLM's scheduler over several steps: the case that drops rows in
genlm-backend 0.3.1.

vLLM's CPU attention kernels need a head size of 32 or more; the tiny registry assets
have 16 (hidden 64, 4 heads), so the tiny model here is built the same way (seeded
random Llama, tiny-llama-spm's tokenizer) with 2 heads of 32.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from session_requires import require

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache per CPU engine


#: Engine options of the test engines (small, exact, LoRA-capable).
ENGINE_OPTS: dict[str, Any] = {
    "dtype": "float32",
    "max_model_len": 512,
    "max_num_seqs": 4,
    "enforce_eager": True,
    "enable_lora": True,
    "max_lora_rank": 8,
    "seed": 0,
}


def build_tiny_llama(tokenizer_src: Path, out: Path) -> Path:
    """A seeded random 2-layer Llama (head size 32) with a real SentencePiece tokenizer."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tokenizer_src)
    torch.manual_seed(1234)
    config = LlamaConfig(
        vocab_size=max(tok.get_vocab().values()) + 1,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    LlamaForCausalLM(config).eval().save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def model_paths(asset_model_dir, tmp_path_factory) -> Callable[[str], str]:
    """``model_paths(key)``: local directory of the test model ``key``."""
    paths: dict[str, str] = {}

    def get(key: str) -> str:
        if key not in paths:
            if key == "smollm2":
                paths[key] = str(asset_model_dir("smollm2-135m-instruct"))
            elif key == "tiny":
                out = tmp_path_factory.mktemp("tiny-llama-spm-hd32")
                paths[key] = str(build_tiny_llama(asset_model_dir("tiny-llama-spm"), out))
            else:
                raise KeyError(key)
        return paths[key]

    return get


class Engine:
    """A session's vLLM engine with its decoded vocabulary."""

    def __init__(self, path: str) -> None:
        import vllm

        from genlm_core.tokenization import decode_vocab

        self.path = path
        self.llm = vllm.LLM(model=path, enable_prefix_caching=True, max_logprobs=-1, **ENGINE_OPTS)
        width = self.llm.llm_engine.model_config.get_vocab_size()
        self.byte_vocab = decode_vocab(self.llm.get_tokenizer(), vocab_size=width)

    def lm(self, **opts: Any) -> Any:
        """A fresh AsyncVirtualLM around the shared engine."""
        from genlm_vllm.lm import AsyncVirtualLM

        return AsyncVirtualLM(self.llm, owns_engine=False, byte_vocab=self.byte_vocab, **opts)

    def close(self) -> None:
        from genlm_vllm._compat import shutdown_engine

        shutdown_engine(self.llm.llm_engine)


@pytest.fixture(scope="session")
def engines(model_paths) -> Callable[[str], Engine]:
    """``engines(key)``: the session's engine for ``"smollm2"`` or ``"tiny"``."""
    started: dict[str, Engine] = {}

    def get(key: str) -> Engine:
        if key not in started:
            started[key] = Engine(model_paths(key))
        return started[key]

    yield get
    for engine in started.values():
        engine.close()


@pytest.fixture(scope="session")
def hf_reference(model_paths) -> Callable[[str], Any]:
    """``hf_reference(key)``: genlm-hf's AsyncTransformer on the same weights (fp32)."""
    require(
        "genlm_hf.lm", reason="genlm-hf is not installed (the reference of the agreement tests)"
    )
    from genlm_hf.lm import AsyncTransformer

    loaded: dict[str, Any] = {}

    def get(key: str) -> Any:
        if key not in loaded:
            loaded[key] = AsyncTransformer.from_name(model_paths(key))
        return loaded[key]

    yield get
    for lm in loaded.values():
        lm.cleanup()


@pytest.fixture
def live(engines):
    """The tiny engine's model, no cache, with no live context left from an earlier test."""
    lm = engines("tiny").lm(cache_size=0)
    asyncio.run(lm.release_all())
    yield lm
    lm.cleanup()

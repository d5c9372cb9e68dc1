"""Tiny random-weight models of the architectures genlm-hf's caches must be exact on, and
the tolerance their bfloat16 rows are held to."""

from __future__ import annotations

from typing import Any

import torch

#: model type -> extra config (None: GPT-2's own option names).
ARCHITECTURES = {
    "llama": ("llama", {}),
    "qwen2": ("qwen2", {}),
    # head_dim and the window set so that the window (8) is shorter than the prompts
    "gemma2": ("gemma2", {"head_dim": 16, "sliding_window": 8, "query_pre_attn_scalar": 16}),
    "gpt2": ("gpt2", None),
}


def arch_model(name: str, vocab_size: int, dtype: torch.dtype, device: str) -> Any:
    """A 2-layer random-weight model of architecture ``name`` (seeded: the same weights)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    model_type, extra = ARCHITECTURES[name]
    if extra is None:  # GPT-2's own names
        opts = {"n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 512}
    else:
        opts = {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 512,
            **extra,
        }
    config = AutoConfig.for_model(model_type, vocab_size=vocab_size, **opts)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config).to(device=device, dtype=dtype).eval()


def bf16_tolerance(reference: torch.Tensor) -> float:
    """Two bfloat16 ulps of the row's largest logit (tests/hf/test_cuda.py says why)."""
    spread = (reference.max() - reference.mean()).item()
    return 2 * torch.finfo(torch.bfloat16).eps * max(1.0, spread)

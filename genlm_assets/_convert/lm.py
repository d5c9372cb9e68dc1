"""Causal LM dirs: a dequantized GGUF, and deterministic tiny random models."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from genlm_assets._convert.hfdir import add_top_level_rope_theta, save_tokenizer

__all__ = [
    "TINY_SEED",
    "reloaded_weights_sha256",
    "save_gguf_as_hf",
    "save_tiny_lm",
    "weights_sha256",
]

TINY_SEED = 1234


def weights_sha256(model: Any) -> str:
    """sha256 of every tensor of ``model.state_dict()``, in sorted key order.

    Independent of the file format and of tied-weight bookkeeping on disk, so a
    built model and the same model reloaded hash alike.
    """
    state = model.state_dict()
    digest = hashlib.sha256()
    for key in sorted(state):
        digest.update(state[key].detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def save_gguf_as_hf(
    gguf_file: Path, out: Path, say: Callable[[str], None] = lambda message: None
) -> dict[str, Any]:
    """Dequantize a GGUF causal LM to an fp32 HF dir (safetensors + tokenizer).

    A GGUF-loaded model refuses ``save_pretrained``, so its state dict is copied into
    a fresh model built from the same config. ``say`` gets a line per step (the steps
    take seconds each, silently otherwise).

    Returns:
        Marker fields: ``weights_sha256`` and ``parameters``.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_file.parent), gguf_file.name
    say(f"reading and dequantizing {name}")
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    quantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(quantized.state_dict(), strict=False)
    del quantized
    tied = {"lm_head.weight"} if model.config.tie_word_embeddings else set()
    if set(missing) - tied or unexpected:
        raise ValueError(
            f"GGUF weights do not fit {type(model).__name__}: "
            f"missing {sorted(missing)}, unexpected {sorted(unexpected)}"
        )
    say("writing the float32 weights and the tokenizer")
    model.eval().save_pretrained(str(out))
    save_tokenizer(tokenizer, out)
    add_top_level_rope_theta(out)
    return {
        "weights_sha256": weights_sha256(model),
        "parameters": sum(p.numel() for p in model.parameters()),
    }


def save_tiny_lm(arch: str, tokenizer_dir: Path, out: Path) -> dict[str, Any]:
    """Build a deterministic random-init ``gpt2`` or ``llama`` model over a real tokenizer.

    The vocabulary size is the largest token id + 1, so holes and added tokens are
    covered. GPT-2 weights are stored under the original GPT-2 names (no
    ``transformer.`` prefix, no tied ``lm_head``), which both transformers and
    mlx-lm load.

    Returns:
        Marker fields: ``weights_sha256``, ``parameters`` and ``vocab_size``.
    """
    import torch
    from transformers import (
        AutoTokenizer,
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
    )

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    vocab_size = max(tokenizer.get_vocab().values()) + 1
    special = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id}
    torch.manual_seed(TINY_SEED)
    if arch == "gpt2":
        config = GPT2Config(
            vocab_size=vocab_size, n_positions=512, n_embd=64, n_layer=2, n_head=4, **special
        )
        model = GPT2LMHeadModel(config)
    elif arch == "llama":
        config = LlamaConfig(
            vocab_size=vocab_size,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=512,
            rope_theta=10000.0,
            tie_word_embeddings=False,
            **special,
        )
        model = LlamaForCausalLM(config)
    else:
        raise ValueError(f"tiny model architecture must be 'gpt2' or 'llama', got {arch!r}")
    model.eval().save_pretrained(str(out))
    save_tokenizer(tokenizer, out)
    add_top_level_rope_theta(out)
    if arch == "gpt2":
        _rename_gpt2_weights(out / "model.safetensors")
    return {
        "weights_sha256": weights_sha256(model),
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": vocab_size,
    }


def _rename_gpt2_weights(path: Path) -> None:
    from safetensors.torch import load_file, save_file

    weights = load_file(str(path))
    renamed = {
        key.removeprefix("transformer."): tensor.contiguous()
        for key, tensor in weights.items()
        if key != "lm_head.weight"
    }
    save_file(renamed, str(path), metadata={"format": "pt"})


def reloaded_weights_sha256(directory: Path) -> str:
    """Load ``directory`` with ``AutoModelForCausalLM`` and hash its weights."""
    from transformers import AutoModelForCausalLM

    return weights_sha256(AutoModelForCausalLM.from_pretrained(str(directory)))

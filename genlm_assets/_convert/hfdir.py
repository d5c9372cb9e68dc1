"""Small fix-ups that make saved Hugging Face dirs load everywhere we need them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["add_top_level_rope_theta", "make_tokenizer_config_portable", "save_tokenizer"]


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def _write(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def make_tokenizer_config_portable(directory: Path) -> None:
    """Rewrite ``tokenizer_config.json`` so transformers 4.x loads it as well as 5.x.

    transformers 5 writes ``"tokenizer_class": "TokenizersBackend"`` and a list-valued
    ``extra_special_tokens``; 4.x knows neither. The loaded tokenizer is the same.
    """
    path = directory / "tokenizer_config.json"
    config = _read(path)
    if config.get("tokenizer_class") == "TokenizersBackend":
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
    extra = config.get("extra_special_tokens")
    if isinstance(extra, list):
        del config["extra_special_tokens"]
        named = (config.get("bos_token"), config.get("eos_token"))
        config["additional_special_tokens"] = [t for t in extra if t not in named]
    for key in ("backend", "is_local", "local_files_only"):
        config.pop(key, None)
    _write(path, config)


def save_tokenizer(tokenizer: Any, directory: Path) -> None:
    """``save_pretrained`` followed by [`make_tokenizer_config_portable`][]."""
    tokenizer.save_pretrained(str(directory))
    make_tokenizer_config_portable(directory)


def add_top_level_rope_theta(directory: Path) -> None:
    """Copy ``rope_parameters.rope_theta`` to a top-level ``rope_theta`` in ``config.json``.

    transformers 5 nests it; mlx-lm reads only the top-level key and silently falls
    back to 10000 otherwise, which gives wrong logits. GPT-2 configs also get
    ``n_ctx`` (required by mlx-lm's GPT-2 loader).
    """
    path = directory / "config.json"
    config = _read(path)
    theta = (config.get("rope_parameters") or {}).get("rope_theta")
    if theta is not None:
        config.setdefault("rope_theta", theta)
    if config.get("model_type") == "gpt2":
        config.setdefault("n_ctx", config["n_positions"])
    _write(path, config)

"""Loading mlx-lm models from hub names or local directories, with config fixes.

The trap this module exists for: transformers 5 writes RoPE settings as
``rope_parameters: {rope_theta: ..., rope_type: ...}``, while mlx-lm's Llama-family
models read a top-level ``rope_theta`` (default 10000) and ``rope_scaling``. Loading
such a checkpoint as is gives plausible but wrong log-probs, with no error. We read
``config.json`` ourselves and hand mlx-lm the missing top-level values through its
``model_config`` overrides (the user's directory is never written), then check that
the built model really uses the expected theta, and refuse with a clear error if not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from genlm_core.errors import GenlmError

__all__ = ["ModelLoadError", "config_overrides", "load_model", "resolve_path"]

#: Files mlx-lm needs from a hub repository.
_PATTERNS = ["*.json", "*.safetensors", "*.py", "tokenizer.model", "*.tiktoken", "*.txt", "*.jinja"]


class ModelLoadError(GenlmError, RuntimeError):
    """A model, its tokenizer or an adapter could not be loaded."""


def resolve_path(model_name: str, revision: str | None = None) -> Path:
    """A local directory for ``model_name``: itself, or its Hugging Face cache snapshot.

    Raises:
        ModelLoadError: Not a directory and not obtainable from the hub (offline or
            unknown).
    """
    path = Path(model_name).expanduser()
    if path.is_dir():
        return path
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model_name, revision=revision, allow_patterns=_PATTERNS))
    except Exception as exc:
        raise ModelLoadError(
            f"could not find model {model_name!r}: {type(exc).__name__}: {exc}. Pass a local "
            f"directory holding config.json, *.safetensors and the tokenizer files, or a hub "
            f"id already in the Hugging Face cache (downloads need network access and "
            f"HF_HUB_OFFLINE unset)"
        ) from exc


def config_overrides(config: dict[str, Any]) -> dict[str, Any]:
    """Config keys mlx-lm needs under other names than transformers 5 writes them.

    Top-level RoPE keys (transformers 5 nests them in ``rope_parameters``), and GPT-2's
    ``n_ctx`` (dropped in favour of ``n_positions``).

    Returns the ``model_config`` overrides (empty when the config is fine as is).
    """
    out: dict[str, Any] = {}
    if config.get("model_type") == "gpt2" and "n_ctx" not in config and "n_positions" in config:
        out["n_ctx"] = config["n_positions"]  # mlx-lm's GPT-2 requires the old name
    params = config.get("rope_parameters")
    if not isinstance(params, dict) or not params:
        return out
    if "rope_theta" in params:  # one set of parameters for every layer
        if "rope_theta" not in config:
            out["rope_theta"] = params["rope_theta"]
        kind = params.get("rope_type", params.get("type", "default"))
        if kind not in (None, "default") and not config.get("rope_scaling"):
            out["rope_scaling"] = {k: v for k, v in params.items() if k != "rope_theta"}
    elif all(isinstance(v, dict) for v in params.values()):  # per layer type (Gemma 3)
        full = params.get("full_attention", {})
        local = params.get("sliding_attention", {})
        if "rope_theta" not in config and "rope_theta" in full:
            out["rope_theta"] = full["rope_theta"]
        if "rope_local_base_freq" not in config and "rope_theta" in local:
            out["rope_local_base_freq"] = local["rope_theta"]
    return out


def load_model(path: Path, model_config: dict[str, Any] | None = None) -> tuple[Any, dict]:
    """Build the mlx-lm model of ``path`` with the RoPE fix; return it and its config.

    Raises:
        ModelLoadError: mlx-lm cannot load it, or the built model ignores the RoPE
            theta of the checkpoint.
    """
    from mlx_lm.utils import load_model as mlx_load_model

    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(
            f"could not read {path / 'config.json'}: {type(exc).__name__}: {exc}"
        ) from exc
    overrides = {**config_overrides(config), **(model_config or {})}
    try:
        model, _ = mlx_load_model(path, model_config=overrides)
    except Exception as exc:
        raise ModelLoadError(
            f"mlx-lm could not load {str(path)!r} (model_type "
            f"{config.get('model_type')!r}): {type(exc).__name__}: {exc}"
        ) from exc
    expected = overrides.get("rope_theta", config.get("rope_theta"))
    args = getattr(model, "args", None)
    actual = getattr(args, "rope_theta", None)
    if expected is not None and actual is not None and float(actual) != float(expected):
        raise ModelLoadError(
            f"mlx-lm built {config.get('model_type')!r} from {str(path)!r} with "
            f"rope_theta={actual}, but the checkpoint says {expected}: its log-probs would "
            f'be wrong. Add a top-level "rope_theta": {expected} to a copy of config.json, '
            f"or pass model_config={{'rope_theta': {expected}}}"
        )
    return model, {**config, **overrides}

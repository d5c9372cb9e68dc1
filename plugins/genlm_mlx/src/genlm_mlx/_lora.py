"""Per-request LoRA adapters in mlx-lm's format, several on one model.

mlx-lm's own loader (``load_adapters``) replaces a model's linear layers with
``LoRALinear`` holding *one* adapter. To serve several adapters and the base model
from one set of weights, each targeted linear layer is wrapped once in
[`SwitchLoRALinear`][], which holds every adapter's ``(lora_a, lora_b, scale)``
and applies the one a shared [`Switch`][] names (none: the base layer alone).
The math is mlx-lm's: ``y = base(x) + scale * ((x @ lora_a) @ lora_b)``.

Adapter format (what ``mlx_lm.lora`` saves): a directory with ``adapter_config.json``
(``fine_tune_type: "lora"``, ``lora_parameters: {rank, scale, ...}``) and
``adapters.safetensors`` whose keys are ``<module path>.lora_a`` / ``.lora_b``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_unflatten

from genlm_mlx._loading import ModelLoadError

__all__ = ["Switch", "SwitchLoRALinear", "load_adapter", "unload_adapter"]


class Switch:
    """Which adapter the wrapped layers apply (None: the base model)."""

    def __init__(self) -> None:
        self.active: str | None = None


class _Bank:
    """Adapter weights of one layer, kept out of the module's parameter tree."""

    def __init__(self) -> None:
        self.adapters: dict[str, tuple[mx.array, mx.array, float]] = {}


class SwitchLoRALinear(nn.Module):
    """A linear layer plus any number of LoRA adapters, one applied at a time."""

    def __init__(self, base: nn.Module, switch: Switch) -> None:
        super().__init__()
        self.base = base
        self._switch = switch
        self._bank = _Bank()

    def __call__(self, x: mx.array) -> mx.array:
        y = self.base(x)
        adapter = self._bank.adapters.get(self._switch.active)  # type: ignore[arg-type]
        if adapter is None:
            return y
        a, b, scale = adapter
        return y + (scale * ((x @ a) @ b)).astype(x.dtype)


def _read_config(path: Path) -> dict[str, Any]:
    try:
        config = json.loads((path / "adapter_config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(
            f"could not read {path / 'adapter_config.json'}: {type(exc).__name__}: {exc}. "
            f"Pass a directory saved by mlx_lm.lora (adapter_config.json + adapters.safetensors)"
        ) from exc
    kind = config.get("fine_tune_type", "lora")
    if kind != "lora":
        raise ModelLoadError(
            f"adapter at {str(path)!r} has fine_tune_type={kind!r}; only 'lora' adapters can be "
            f"switched per request (fuse a {kind!r} adapter into the weights with mlx_lm.fuse)"
        )
    return config


def load_adapter(model: nn.Module, switch: Switch, path: str | Path, name: str) -> None:
    """Add the adapter at ``path`` under ``name``, wrapping its target layers once.

    Raises:
        ModelLoadError: Unreadable files, a non-LoRA adapter, or weights that do not
            fit the model (unknown module, wrong shapes).
    """
    path = Path(path)
    config = _read_config(path)
    scale = float(config.get("lora_parameters", {}).get("scale", 20.0))
    try:
        weights = mx.load(str(path / "adapters.safetensors"))
    except Exception as exc:
        raise ModelLoadError(
            f"could not read {path / 'adapters.safetensors'}: {type(exc).__name__}: {exc}"
        ) from exc
    pairs: dict[str, dict[str, mx.array]] = {}
    for key, value in weights.items():
        module, _, leaf = key.rpartition(".")
        if leaf in ("lora_a", "lora_b"):
            pairs.setdefault(module, {})[leaf] = value
    if not pairs:
        raise ModelLoadError(f"{path / 'adapters.safetensors'} holds no lora_a/lora_b arrays")
    modules = dict(model.named_modules())
    plan: list[tuple[str, nn.Module, mx.array, mx.array]] = []
    for module_path, ab in sorted(pairs.items()):
        if set(ab) != {"lora_a", "lora_b"}:
            raise ModelLoadError(f"adapter {name!r}: {module_path} lacks lora_a or lora_b")
        layer = modules.get(module_path)
        target = layer.base if isinstance(layer, SwitchLoRALinear) else layer
        if not isinstance(target, (nn.Linear, nn.QuantizedLinear)):
            raise ModelLoadError(
                f"adapter {name!r} targets {module_path!r}, which is "
                f"{type(target).__name__ if target is not None else 'not a module'} of this "
                f"model, not a linear layer; was it trained for another base model?"
            )
        a, b = ab["lora_a"], ab["lora_b"]
        out_dims = target.weight.shape[0]
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0] or b.shape[1] != out_dims:
            raise ModelLoadError(
                f"adapter {name!r}: {module_path} has lora_a {a.shape} and lora_b {b.shape}, "
                f"which do not fit a layer with {out_dims} outputs"
            )
        plan.append((module_path, layer, a, b))
    # Evaluate here: mlx streams are per thread, and forwards run in the batcher's thread,
    # which cannot run graph nodes recorded on this one.
    mx.eval([arrays for _, _, *arrays in plan])
    wraps = []
    for module_path, layer, a, b in plan:
        if not isinstance(layer, SwitchLoRALinear):
            layer = SwitchLoRALinear(layer, switch)
            wraps.append((module_path, layer))
        layer._bank.adapters[name] = (a, b, scale)
    if wraps:
        model.update_modules(tree_unflatten(wraps))


def unload_adapter(model: nn.Module, name: str) -> None:
    """Forget adapter ``name`` in every wrapped layer (the wrappers stay)."""
    for _, module in model.named_modules():
        if isinstance(module, SwitchLoRALinear):
            module._bank.adapters.pop(name, None)

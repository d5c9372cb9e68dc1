"""Errors genlm-hf raises besides genlm-core's (each a GenlmError and a builtin)."""

from __future__ import annotations

from genlm_core.errors import GenlmError

__all__ = ["MissingDependencyError", "ModelLoadError"]


class ModelLoadError(GenlmError, OSError):
    """A model, tokenizer or LoRA adapter could not be loaded."""


class MissingDependencyError(GenlmError, ImportError):
    """An optional dependency (peft, bitsandbytes) is needed for what was asked."""

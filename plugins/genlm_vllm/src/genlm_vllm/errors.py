"""Errors genlm-vllm raises besides genlm-core's (each a GenlmError and a builtin)."""

from __future__ import annotations

from genlm_core.errors import GenlmError

__all__ = ["EngineOutputError", "ModelLoadError", "UnsupportedVLLMError"]


class UnsupportedVLLMError(GenlmError, ImportError):
    """The installed vLLM is outside the range genlm-vllm supports."""


class EngineOutputError(GenlmError, RuntimeError):
    """The engine finished without returning a result for some request."""


class ModelLoadError(GenlmError, OSError):
    """A model or LoRA adapter could not be loaded into the engine."""

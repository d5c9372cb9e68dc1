"""Errors genlm-sgl raises besides genlm-core's (each a GenlmError and a builtin)."""

from __future__ import annotations

from genlm_core.errors import GenlmError

__all__ = ["EngineOutputError", "ModelLoadError", "ServerError", "UnsupportedSGLangError"]


class UnsupportedSGLangError(GenlmError, ImportError):
    """The installed SGLang is outside the range genlm-sgl supports, or cannot run here."""


class EngineOutputError(GenlmError, RuntimeError):
    """The engine finished without returning a result for some request."""


class ModelLoadError(GenlmError, OSError):
    """A model or LoRA adapter could not be loaded into the engine."""


class ServerError(GenlmError, ConnectionError):
    """An SGLang server could not be reached, or kept failing, within the retry budget."""

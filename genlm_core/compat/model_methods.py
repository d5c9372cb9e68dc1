"""genlm-backend 0.3.1 methods that clients still call, kept on every official backend.

Plain functions the official bases and ``MockAsyncLM`` hold as methods, so code written
against genlm-backend keeps working (llamppl calls ``reset_async_queries``).
"""

from __future__ import annotations

from typing import NoReturn

__all__ = ["clear_lora", "reset_async_queries", "set_lora"]


def reset_async_queries(lm: object) -> None:
    """Kept for genlm-backend's clients: the batcher leaves no query to reset."""


def set_lora(lm: object, lora_path: str, lora_name: str) -> NoReturn:
    """Removed in genlm-backend 0.3.1 too: select an adapter per call, ``lora_name=``.

    Raises:
        RuntimeError: Always, with genlm-backend's words.
    """
    raise RuntimeError(
        "set_lora() was removed: there is no active-adapter global anymore. "
        "Pass lora_name= per call (next_token_logprobs/sample/...)."
    )


def clear_lora(lm: object) -> NoReturn:
    """Removed in genlm-backend 0.3.1 too: ``lora_name=None`` (the default) is the base model.

    Raises:
        RuntimeError: Always, with genlm-backend's words.
    """
    raise RuntimeError("clear_lora() was removed: omit lora_name (None = base model).")

"""genlm-backend 0.3.1 methods that clients still call, kept on every official backend.

Plain functions the model bases and ``MockAsyncLM`` hold as methods, so code written
against genlm-backend keeps working (llamppl calls ``reset_async_queries``).
"""

from __future__ import annotations

import asyncio
from typing import Any, NoReturn

__all__ = ["cleanup", "cleanup_async", "clear_lora", "reset_async_queries", "set_lora"]


def cleanup(lm: Any) -> None:
    """genlm-backend's name for ``close()``: release the model (idempotent).

    A subclass that overrides it still runs on ``close()``, its ``super().cleanup()`` last.
    """
    lm._close()


async def cleanup_async(lm: Any) -> None:
    """``close()`` off the event loop, without first answering the calls made (``aclose`` does)."""
    await asyncio.to_thread(lm.close)


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

"""genlm-backend 0.3.1 methods that clients still call, kept on every official backend.

A mixin (first among the bases of the model classes of genlm-hf, genlm-vllm,
genlm-mlx, genlm-sgl and of :class:`~genlm_core.testing.MockAsyncLM`), so that code
written against genlm-backend keeps working after the import rename: llamppl's
``CachedCausalLM.reset_async_queries()`` calls the model's ``reset_async_queries``.
``tests/core/test_backend_methods.py`` and each plugin's test compare these classes'
public methods with genlm-backend 0.3.1's; docs/migrating.md lists the few not kept.
"""

from __future__ import annotations

from typing import NoReturn

__all__ = ["GenlmBackendCompat"]


class GenlmBackendCompat:
    """genlm-backend's ``reset_async_queries``, ``set_lora`` and ``clear_lora``."""

    def reset_async_queries(self) -> None:
        """Kept for genlm-backend's clients; there is nothing to reset.

        genlm-backend's hf backend kept a queue of queries that an exception in the
        caller's inference could leave behind, and this emptied it. genlm-core's batcher
        leaves none: a failed batch fails each of its callers, a cancelled caller's
        request is dropped before it runs, and the next batch starts clean.
        """

    def set_lora(self, lora_path: str, lora_name: str) -> NoReturn:
        """Removed in genlm-backend 0.3.1 too: select an adapter per call, ``lora_name=``.

        Raises:
            RuntimeError: Always, with genlm-backend's words.
        """
        raise RuntimeError(
            "set_lora() was removed: there is no active-adapter global anymore. "
            "Pass lora_name= per call (next_token_logprobs/sample/...)."
        )

    def clear_lora(self) -> NoReturn:
        """Removed in genlm-backend 0.3.1 too: ``lora_name=None`` (the default) is the base model.

        Raises:
            RuntimeError: Always, with genlm-backend's words.
        """
        raise RuntimeError("clear_lora() was removed: omit lora_name (None = base model).")

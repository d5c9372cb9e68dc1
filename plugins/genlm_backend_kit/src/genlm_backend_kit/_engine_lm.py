"""EngineLM: the base of backends that hand each batch to an engine with its own scheduler.

genlm-vllm and genlm-sgl share here: whether the wrapper owns the engine, the engine's
lock around adapter loading and shutdown, the LoRA hooks' checks, and the release.
"""

from __future__ import annotations

import gc
from abc import abstractmethod
from typing import Any

from genlm_backend_kit._hook_names import ENGINE, adopt_old_hook_names
from genlm_core.compat import model_methods as _compat
from genlm_core.errors import InvalidArgumentError
from genlm_core.lm import BatchedAsyncLM, LoraAdapter
from genlm_core.loading import merge_engine_options, resolve_model_name


class EngineLM(BatchedAsyncLM):
    """A [`BatchedAsyncLM`][genlm_core.lm.BatchedAsyncLM] whose batches run in an engine.

    Args:
        owns_engine: Whether closing the model shuts the engine down. Pass False to
            put several wrappers over one engine; the caller then shuts it down.
        **kwargs: The batching and cache options of
            [`BatchedAsyncLM`][genlm_core.lm.BatchedAsyncLM].
    """

    #: The engine splits a batch into its own steps (continuous batching), so larger
    #: hand-offs only save round trips.
    default_batch_size = 256
    #: The backend's name (``backend=``), in messages.
    backend_name = "engine"
    #: The engine's name in messages ("vLLM", "SGLang").
    engine_name = "the"
    #: How to start the engine with LoRA support (said when it was started without).
    lora_hint = "start the engine with LoRA support"
    # genlm-backend 0.3.1's methods, kept for its clients (see genlm_core.compat.model_methods).
    reset_async_queries = _compat.reset_async_queries
    set_lora = _compat.set_lora
    clear_lora = _compat.clear_lora

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        adopt_old_hook_names(cls, ENGINE)

    def __init__(self, tokenizer: Any, *, owns_engine: bool = True, **kwargs: Any) -> None:
        super().__init__(tokenizer, **kwargs)
        self.owns_engine = owns_engine

    @classmethod
    def from_name(
        cls,
        model_name: str,
        engine_opts: dict[str, Any] | None = None,
        *,
        dtype: str | None = None,
        revision: str | None = None,
        **kwargs: Any,
    ) -> EngineLM:
        """Start an engine for ``model_name`` and wrap it.

        Args:
            model_name: A local directory, an embedded model's name
                (``"smollm2-135m-instruct"``) or a hub id.
            engine_opts: The engine's own options (see the class's [`start_engine`][]).
            dtype: The weights' dtype: ``"float32"``, ``"bfloat16"``, ``"float16"`` or
                ``"auto"``; the engine's ``dtype`` option (float32 on a CPU by default).
            revision: Hub revision (a branch, tag or commit); the engine's ``revision``.
            **kwargs: Passed to the class (``owns_engine``, ``batch_size``, the cache
                options).

        Raises:
            ModelNotFoundError: No such directory, or a hub id that cannot load here.
            InvalidArgumentError: A bad ``dtype``, or ``engine_opts`` that disagree.
            Exception: What [`start_engine`][] raises (the engine could not start).
        """
        opts = merge_engine_options(engine_opts, cls.backend_name, dtype=dtype, revision=revision)
        opts = cls.engine_options(opts)  # a bad option fails before anything is loaded
        name = resolve_model_name(model_name)  # fails fast, before the engine starts
        engine = cls.start_engine(name, opts)
        try:
            return cls(engine, **kwargs)
        except BaseException:
            cls.stop_engine(engine)
            raise

    @classmethod
    def engine_options(cls, engine_opts: dict[str, Any]) -> dict[str, Any]:
        """The engine's options: the backend's defaults under ``engine_opts``, checked."""
        return dict(engine_opts)

    @classmethod
    @abstractmethod
    def start_engine(cls, model_name: str, engine_opts: dict[str, Any]) -> Any:
        """Start an engine for the resolved ``model_name`` with [`engine_options`][]."""

    @staticmethod
    @abstractmethod
    def stop_engine(engine: Any) -> None:
        """Stop an engine [`start_engine`][] started (the wrapper could not be made)."""

    @abstractmethod
    def engine_lock(self) -> Any:
        """The engine's lock (one per engine, shared by the wrappers over it)."""

    @abstractmethod
    def engine_has_lora(self) -> bool:
        """Whether the engine was started with LoRA support."""

    @abstractmethod
    def load_into_engine(self, adapter: LoraAdapter) -> Any:
        """Load an adapter version into the engine (its lock held); return its handle."""

    @abstractmethod
    def unload_from_engine(self, handle: Any) -> None:
        """Unload an adapter version from the engine (its lock held)."""

    @abstractmethod
    def close_engine(self) -> None:
        """Stop the engine and free what it holds (its lock held)."""

    def load_adapter(self, adapter: LoraAdapter) -> Any:
        """Load an adapter version into the engine (the core's hook).

        Raises:
            InvalidArgumentError: The engine was started without LoRA support.
        """
        if not self.engine_has_lora():
            raise InvalidArgumentError(
                f"this {self.engine_name} engine was started without LoRA support; {self.lora_hint}"
            )
        with self.engine_lock():
            return self.load_into_engine(adapter)

    def unload_adapter(self, adapter: LoraAdapter, handle: Any) -> None:
        """Unload an adapter version from the engine (the core's hook)."""
        with self.engine_lock():
            self.unload_from_engine(handle)

    def _release(self) -> None:
        super()._release()  # closes the batchers, unloads the adapters, clears the caches
        with self.engine_lock():  # waits for an engine run in flight (a sample, say)
            if self.owns_engine:
                self.close_engine()
        self._drop_engine()
        gc.collect()

    def _drop_engine(self) -> None:  # noqa: B027 - optional hook
        """Forget the references to the engine, so that it can be freed."""

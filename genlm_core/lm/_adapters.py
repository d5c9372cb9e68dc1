"""LoRA adapter bookkeeping shared by every backend: names, versions, engine handles.

Why. ``add_new_lora(path, name)`` under a name already loaded replaces that adapter,
and ``remove_lora(name)`` unloads it, possibly while requests for it wait in the
batcher or compute. Every request therefore carries the **generation** of the adapter
version it was made for (``Request.generation``; 0 is the base model): requests and
cached rows are keyed by it, so a call that starts after a replacement never meets a
row of the old version, even one still being computed. Generations come from one
process-wide counter and are never reused, so an adapter removed and added again under
the same name is a new version too.

A backend implements two hooks, :meth:`~genlm_core.lm.AsyncLMBase.load_adapter` and
:meth:`~genlm_core.lm.AsyncLMBase.unload_adapter`; the core calls them with the model
held exclusively (no batch computing) and keeps this table.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from genlm_core.errors import InvalidArgumentError, LoraNotSupportedError, UnknownLoraError

if TYPE_CHECKING:
    from genlm_core.lm._requests import PrefixRequest, Request

__all__ = ["AdapterTable", "LoraAdapter", "LoraAdapters", "new_generation"]

_GENERATIONS = itertools.count(1)
_GENERATIONS_LOCK = threading.Lock()


def new_generation() -> int:
    """A generation number no adapter of this process had before (base model: 0)."""
    with _GENERATIONS_LOCK:
        return next(_GENERATIONS)


@dataclass(frozen=True)
class LoraAdapter:
    """One loaded version of a LoRA adapter.

    Attributes:
        name: The user's name for it (``lora_name=`` of calls).
        path: Where it was loaded from (as given to ``add_new_lora``).
        generation: This version's number, unique in the process.
    """

    name: str
    path: str
    generation: int

    @property
    def engine_name(self) -> str:
        """A name unique to this version, for engines that key adapters by name."""
        return f"{self.name}@{self.generation}"


class AdapterTable:
    """The adapters a model has loaded: name -> (current version, the backend's handle).

    Reads are single dict lookups (safe from any thread); changes happen under the
    model's exclusive access.
    """

    def __init__(self) -> None:
        self._loaded: dict[str, tuple[LoraAdapter, Any]] = {}

    def names(self) -> list[str]:
        """The loaded adapters' names, sorted."""
        return sorted(self._loaded)

    def generation(self, name: str) -> int | None:
        """The current version of adapter ``name``, or None when it is not loaded."""
        entry = self._loaded.get(name)
        return None if entry is None else entry[0].generation

    def get(self, name: str) -> tuple[LoraAdapter, Any] | None:
        """The current version of ``name`` and its handle, or None."""
        return self._loaded.get(name)

    def put(self, adapter: LoraAdapter, handle: Any) -> tuple[LoraAdapter, Any] | None:
        """Make ``adapter`` the current version of its name; return the one it replaces."""
        old = self._loaded.get(adapter.name)
        self._loaded[adapter.name] = (adapter, handle)
        return old

    def pop(self, name: str) -> tuple[LoraAdapter, Any] | None:
        """Forget adapter ``name``; return its version and handle, or None."""
        return self._loaded.pop(name, None)

    def entries(self) -> list[tuple[LoraAdapter, Any]]:
        """Every loaded version with its handle."""
        return list(self._loaded.values())

    def __len__(self) -> int:
        return len(self._loaded)


class LoraAdapters:
    """The LoRA methods of :class:`~genlm_core.lm.AsyncLMBase` (a mixin).

    The core keeps the adapter table and calls the backend's two hooks,
    :meth:`load_adapter` and :meth:`unload_adapter`, with the model held exclusively:
    no batch computes while an adapter is loaded or unloaded.
    """

    _adapters: AdapterTable
    _check_open: Any
    exclusive_access: Any

    def validate_lora(self, lora_name: str | None) -> str | None:
        """Check that ``lora_name`` is None or an added adapter.

        Raises:
            UnknownLoraError: The adapter was never added (or was removed).
        """
        self._generation(lora_name)
        return lora_name

    def _generation(self, lora_name: str | None) -> int:
        """The current version of ``lora_name`` (0: the base model)."""
        if lora_name is None:
            return 0
        generation = self._adapters.generation(lora_name) if isinstance(lora_name, str) else None
        if generation is None:
            raise UnknownLoraError(self._unknown_lora_message(lora_name))
        return generation

    def _unknown_lora_message(self, lora_name: Any) -> str:
        known = ", ".join(map(repr, self._adapters.names())) or "none"
        return (
            f"unknown LoRA adapter {lora_name!r} (loaded: {known}); add it first with "
            f"lm.add_new_lora(path, {lora_name!r}), or pass lora_name=None for the base model"
        )

    def add_new_lora(self, lora_path: str | os.PathLike[str], lora_name: str = "lora_1") -> None:
        """Load a LoRA adapter under ``lora_name``; select it per call with ``lora_name=``.

        Loading under a name already loaded replaces that adapter: every call that
        starts after this returns computes with the new one (cached rows of the old one
        are dropped and never served). If loading fails the old adapter stays.

        Raises:
            LoraNotSupportedError: The backend cannot load adapters.
            ValueError: ``lora_name`` is not a non-empty string.
            Exception: Whatever the backend's :meth:`load_adapter` raises for a bad path.
        """
        self._check_open()
        if not isinstance(lora_name, str) or not lora_name:
            raise InvalidArgumentError(f"lora_name must be a non-empty string, got {lora_name!r}")
        if type(self).load_adapter is LoraAdapters.load_adapter:
            raise LoraNotSupportedError(
                f"{type(self).__name__} does not support LoRA adapters; load a merged model "
                f"instead, or use a backend that serves adapters (hf, vllm, sgl, mlx)"
            )
        adapter = LoraAdapter(lora_name, os.fspath(lora_path), new_generation())
        with self.exclusive_access():
            handle = self.load_adapter(adapter)
            old = self._adapters.put(adapter, handle)
            if old is not None:
                self.unload_adapter(*old)
            self._forget_adapter_outputs(lora_name)

    def remove_lora(self, lora_name: str) -> None:
        """Unload an adapter added with :meth:`add_new_lora`, with its cached outputs.

        Requests for it that are still waiting fail with :class:`UnknownLoraError`;
        requests for the base model or other adapters are unaffected.

        Raises:
            UnknownLoraError: No adapter of that name is loaded.
        """
        self._check_open()
        with self.exclusive_access():
            entry = self._adapters.pop(lora_name)
            if entry is None:
                raise UnknownLoraError(self._unknown_lora_message(lora_name))
            self.unload_adapter(*entry)
            self._forget_adapter_outputs(lora_name)

    async def add_new_lora_async(
        self, lora_path: str | os.PathLike[str], lora_name: str = "lora_1"
    ) -> None:
        """:meth:`add_new_lora` for coroutines: the same, waited for off the event loop.

        Waiting for the batch in flight and loading the adapter (seconds for a real
        one) run in a thread, so the program's other coroutines keep running.
        """
        await asyncio.to_thread(self.add_new_lora, lora_path, lora_name)

    async def remove_lora_async(self, lora_name: str) -> None:
        """:meth:`remove_lora` for coroutines: the same, waited for off the event loop."""
        await asyncio.to_thread(self.remove_lora, lora_name)

    @property
    def lora_names(self) -> list[str]:
        """Names of the loaded LoRA adapters."""
        return self._adapters.names()

    def load_adapter(self, adapter: LoraAdapter) -> Any:
        """Backend hook: load one adapter version; return the handle computations use.

        Called by :meth:`add_new_lora` with the model held exclusively. Load it under a
        name unique to this version (``adapter.engine_name``) if the engine keys
        adapters by name: the version it replaces is unloaded only after this returns.
        Raise to refuse (bad path, wrong base model): nothing changes then.

        Args:
            adapter: The name, path and generation of the version to load.

        Returns:
            Whatever the backend needs to compute with it (an engine id, a request
            object); :meth:`adapter_handle` gives it back during computations.
        """
        raise LoraNotSupportedError(f"{type(self).__name__} does not support LoRA adapters")

    def unload_adapter(self, adapter: LoraAdapter, handle: Any) -> None:  # noqa: B027
        """Backend hook: unload a version :meth:`load_adapter` loaded (replaced or removed).

        Called with the model held exclusively; drop anything cached for it (keys and
        values). Default: nothing.
        """

    def adapter_handle(self, request: Request | PrefixRequest) -> Any:
        """The backend's handle of the adapter version ``request`` was made for (None: base).

        The core only hands a backend requests whose version is loaded, so during a
        computation this always succeeds.

        Raises:
            UnknownLoraError: That version was replaced or removed.
        """
        if request.lora_name is None:
            return None
        entry = self._adapters.get(request.lora_name)
        if entry is None or entry[0].generation != request.generation:
            raise UnknownLoraError(
                f"LoRA adapter {request.lora_name!r} (version {request.generation}) was "
                f"replaced or removed; make the request again"
            )
        return entry[1]

    def _forget_adapter_outputs(self, lora_name: str) -> None:  # noqa: B027 - a hook
        """Drop cached outputs of adapter ``lora_name`` (replaced or removed). Default: none."""

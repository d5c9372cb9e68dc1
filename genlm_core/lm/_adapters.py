"""LoRA adapter bookkeeping shared by every backend: names, versions, engine handles.

Every request carries the generation of the adapter version it was made for, so a
replaced adapter's rows are never served (docs/architecture.md, "Adapter versions").
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from genlm_core.errors import InvalidArgumentError, LoraNotSupportedError, UnknownLoraError
from genlm_core.lm._requests import PrefixRequest, Request
from genlm_core.runtime import ComputeGate, RequestFailure

log = logging.getLogger(__name__)

# Generation numbers: process-wide, never reused (0 is the base model).
_GENERATIONS = itertools.count(1)
_GENERATIONS_LOCK = threading.Lock()


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


class AdapterHooks(Protocol):
    """The backend's side of adapters (a model's ``load_adapter`` and ``unload_adapter``)."""

    def load_adapter(self, adapter: LoraAdapter) -> Any: ...
    def unload_adapter(self, adapter: LoraAdapter, handle: Any) -> None: ...


class LoraAdapters:
    """A model's adapters: name -> (current version, the backend's handle).

    Reads are single dict lookups (safe from any thread); changes happen under the
    model's exclusive access (``gate``), where the backend's hooks (``hooks``, the model)
    are called. ``forget_outputs`` drops the cached rows of an adapter replaced or removed.
    """

    def __init__(
        self,
        hooks: AdapterHooks,
        gate: ComputeGate,
        *,
        supported: bool,
        forget_outputs: Callable[[str], None],
    ) -> None:
        self._hooks = hooks
        self._gate = gate
        self._supported = supported
        self._forget_outputs = forget_outputs
        self._loaded: dict[str, tuple[LoraAdapter, Any]] = {}

    def names(self) -> list[str]:
        """The loaded adapters' names, sorted."""
        return sorted(self._loaded)

    def generation(self, lora_name: str | None) -> int:
        """The current version of ``lora_name`` (0: the base model); UnknownLoraError if none."""
        if lora_name is None:
            return 0
        entry = self._loaded.get(lora_name) if isinstance(lora_name, str) else None
        if entry is None:
            raise UnknownLoraError(self._unknown(lora_name))
        return entry[0].generation

    def _unknown(self, lora_name: Any) -> str:
        known = ", ".join(map(repr, self.names())) or "none"
        return (
            f"unknown LoRA adapter {lora_name!r} (loaded: {known}); add it first with "
            f"lm.add_new_lora(path, {lora_name!r}), or pass lora_name=None for the base model"
        )

    def add(self, lora_path: str | os.PathLike[str], lora_name: str) -> None:
        """``add_new_lora``: load a new version under ``lora_name``, then unload the old."""
        if not isinstance(lora_name, str) or not lora_name:
            raise InvalidArgumentError(f"lora_name must be a non-empty string, got {lora_name!r}")
        if not self._supported:
            raise LoraNotSupportedError(
                f"{type(self._hooks).__name__} does not support LoRA adapters; load a merged model "
                f"instead, or use a backend that serves adapters (hf, vllm, sgl, mlx)"
            )
        with _GENERATIONS_LOCK:
            generation = next(_GENERATIONS)
        adapter = LoraAdapter(lora_name, os.fspath(lora_path), generation)
        with self._gate.exclusive():
            handle = self._hooks.load_adapter(adapter)
            old = self._loaded.get(lora_name)
            self._loaded[lora_name] = (adapter, handle)
            if old is not None:
                self._hooks.unload_adapter(*old)
            self._forget_outputs(lora_name)

    def remove(self, lora_name: str) -> None:
        """``remove_lora``: unload adapter ``lora_name`` and drop its cached rows."""
        with self._gate.exclusive():
            entry = self._loaded.pop(lora_name, None)
            if entry is None:
                raise UnknownLoraError(self._unknown(lora_name))
            self._hooks.unload_adapter(*entry)
            self._forget_outputs(lora_name)

    def unload_all(self) -> None:
        """Unload every adapter (cleanup); one that fails is logged, the rest still go."""
        with self._gate.exclusive():
            for adapter, handle in list(self._loaded.values()):
                del self._loaded[adapter.name]
                try:
                    self._hooks.unload_adapter(adapter, handle)
                except Exception as exc:  # noqa: BLE001 - reported; the rest must still go
                    log.warning(
                        "%s.cleanup: LoRA adapter %r could not be unloaded (%s: %s)",
                        type(self._hooks).__name__,
                        adapter.name,
                        type(exc).__name__,
                        exc,
                    )

    def handle(self, request: Request | PrefixRequest) -> Any:
        """``adapter_handle``: the handle of ``request``'s version (None: the base model)."""
        if request.lora_name is None:
            return None
        entry = self._loaded.get(request.lora_name)
        if entry is None or entry[0].generation != request.generation:
            raise UnknownLoraError(
                f"LoRA adapter {request.lora_name!r} (version {request.generation}) was "
                f"replaced or removed; make the request again"
            )
        return entry[1]

    def current(self, key: Request | PrefixRequest) -> Request | PrefixRequest | RequestFailure:
        """``key`` for the version loaded now, or a failure if its adapter was removed."""
        name = key.lora_name
        if name is None:
            return key
        entry = self._loaded.get(name)
        if entry is None:
            return RequestFailure(
                UnknownLoraError(
                    f"LoRA adapter {name!r} was removed while this request waited "
                    f"(token_ids={short_ids(key.token_ids)}); add it again with "
                    f"lm.add_new_lora(path, {name!r}), or use another adapter"
                )
            )
        generation = entry[0].generation
        if generation == key.generation:
            return key
        if type(key) is PrefixRequest:
            return dataclasses.replace(key, generation=generation)
        return key._replace(generation=generation)  # type: ignore[union-attr]


def short_ids(token_ids: tuple[int, ...]) -> str:
    """``token_ids`` for a message: whole when short, else its ends."""
    if len(token_ids) <= 12:
        return repr(token_ids)
    head, tail = ", ".join(map(str, token_ids[:5])), ", ".join(map(str, token_ids[-5:]))
    return f"({head}, ..., {tail}) [{len(token_ids)} tokens]"

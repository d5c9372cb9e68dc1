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

import itertools
import threading
from dataclasses import dataclass
from typing import Any

__all__ = ["AdapterTable", "LoraAdapter", "new_generation"]

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

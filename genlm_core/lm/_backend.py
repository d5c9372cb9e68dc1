"""Backend: what a model computes with, a public protocol a plain object can implement.

``BatchedAsyncLM(tokenizer, backend=MyBackend())`` batches, caches, checks and copies
rows around the backend's ``compute_batch``; a subclass implementing ``compute_batch``
(as the official backends do) is its own backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import torch

from genlm_core.lm._requests import Request

#: What a backend may implement besides ``compute_batch``; each is looked up when used.
OPTIONAL_HOOKS = (
    "compute_prefix_batch",
    "load_adapter",
    "unload_adapter",
    "init_worker_thread",
    "close",
)


@runtime_checkable
class Backend(Protocol):
    """The backend's side of a model: compute rows for distinct, validated requests.

    Required: [`compute_batch`][]. Optional, each used when present:

    * ``compute_prefix_batch(requests)``: the rows after every prefix of each
      [`PrefixRequest`][genlm_core.lm.PrefixRequest], in one forward (see
      [`BatchedAsyncLM.compute_prefix_batch`][]).
    * ``load_adapter(adapter) -> handle`` and ``unload_adapter(adapter, handle)``:
      LoRA adapters (see [`AsyncLMBase.load_adapter`][]); without them
      ``add_new_lora`` raises LoraNotSupportedError.
    * ``init_worker_thread()``: called once in the thread batches run in.
    * ``close()``: called once when the model closes, after its adapters are unloaded.
    * ``thread_safe = True``: two computations may run at once (default: never).

    Every method runs in the model's worker thread (or a sync caller's thread), one
    computation at a time unless ``thread_safe``; none runs after the model closed.
    """

    def compute_batch(self, requests: list[Request]) -> Sequence[torch.Tensor]:
        """One float32 row of log-probabilities, ``(len(byte_vocab),)``, per request."""
        ...


def checked_backend(backend: Any) -> Backend:
    """``backend`` if it implements the protocol, else a TypeError that says what is missing."""
    if not callable(getattr(backend, "compute_batch", None)):
        raise TypeError(
            f"backend={backend!r} has no compute_batch method: a backend computes one "
            f"log-probability row per request (genlm_core.lm.Backend); give an object "
            f"with compute_batch(requests), or subclass BatchedAsyncLM and implement it"
        )
    for name in OPTIONAL_HOOKS:
        hook = getattr(backend, name, None)
        if hook is not None and not callable(hook):
            raise TypeError(f"backend.{name} must be a method, got {hook!r}")
    if hasattr(backend, "load_adapter") != hasattr(backend, "unload_adapter"):
        raise TypeError(
            f"backend={backend!r} has only one of load_adapter and unload_adapter: "
            f"a backend with LoRA adapters implements both"
        )
    return backend

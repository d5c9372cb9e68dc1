"""The AsyncLM contract: what every backend offers and what clients may call.

Two layers, following "Protocol for consumers, ABC for implementers":

* :class:`AsyncLM` is a runtime-checkable Protocol: the surface downstream code
  (genlm-control, genlm-bytes style clients) relies on.
* :class:`AsyncLMBase` is the ABC a backend subclasses. It decodes the vocabulary,
  validates token ids and LoRA names, holds the LoRA adapters (a backend implements
  ``load_adapter``/``unload_adapter``) and supplies ``batch_*``, ``prefix_*``,
  ``sample``, ``batch_sample``, context managers and idempotent ``cleanup``.
* :class:`BatchedAsyncLM` adds the shared batcher and output cache: a backend
  implements one method, :meth:`BatchedAsyncLM.compute_batch`, and gets coalesced,
  deduplicated, cached async calls and matching sync calls, one computation at a
  time, checked rows, and each caller its own copy.

Log-probabilities are float32 torch tensors on the CPU, normalised over the full
logits width (``len(byte_vocab)``), as in genlm-backend.
"""

from __future__ import annotations

from genlm_core.lm._adapters import LoraAdapter
from genlm_core.lm._base import AsyncLMBase
from genlm_core.lm._batched import DEFAULT_CACHE_BYTES, BatchedAsyncLM
from genlm_core.lm._protocol import AsyncLM
from genlm_core.lm._requests import PrefixRequest, Request
from genlm_core.lm._sampling import sampling_args

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "AsyncLM",
    "AsyncLMBase",
    "BatchedAsyncLM",
    "LoraAdapter",
    "PrefixRequest",
    "Request",
    "sampling_args",
]

"""The AsyncLM contract: what every backend offers and what clients may call.

Two layers, following "Protocol for consumers, ABC for implementers":

* :class:`AsyncLM` is a runtime-checkable Protocol: the surface downstream code
  (genlm-control, genlm-bytes style clients) relies on.
* :class:`AsyncLMBase` is the ABC a backend subclasses. It decodes the vocabulary,
  validates token ids and LoRA names, and supplies ``batch_*``, ``sample``,
  ``batch_sample``, context managers and idempotent ``cleanup``.
* :class:`BatchedAsyncLM` adds the shared AutoBatcher and OutputCache: a backend
  implements one method, :meth:`BatchedAsyncLM.compute_batch`, and gets coalesced,
  deduplicated, cached async calls and matching sync calls for free.

Log-probabilities are float32 torch tensors on the CPU, normalised over the full
logits width (``len(byte_vocab)``), as in genlm-backend. The two layers live in
:mod:`genlm_core.lm_base` and :mod:`genlm_core.batched_lm`; import them from here.
"""

from __future__ import annotations

from genlm_core.batched_lm import DEFAULT_CACHE_BYTES, BatchedAsyncLM
from genlm_core.lm_base import AsyncLM, AsyncLMBase, PrefixRequest, Request, sampling_args

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "AsyncLM",
    "AsyncLMBase",
    "BatchedAsyncLM",
    "PrefixRequest",
    "Request",
    "sampling_args",
]

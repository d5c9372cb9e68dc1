"""The AsyncLM contract: what clients may call, and the bases backends subclass.

[`AsyncLM`][] is the Protocol clients rely on; [`AsyncLMBase`][] the ABC a backend
subclasses (vocabulary, validation, adapters, sampling, lifecycle); [`BatchedAsyncLM`][]
adds the shared batcher and output cache around a [`Backend`][], which implements only
``compute_batch`` (a plain object given as ``backend=``, or the subclass itself).
"""

from __future__ import annotations

from genlm_core.lm._adapters import LoraAdapter
from genlm_core.lm._backend import Backend
from genlm_core.lm._base import AsyncLMBase, ModelState
from genlm_core.lm._batched import DEFAULT_CACHE_BYTES, BatchedAsyncLM
from genlm_core.lm._protocol import AsyncLM
from genlm_core.lm._requests import PrefixRequest, Request
from genlm_core.lm._sampling import sampling_args

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "AsyncLM",
    "AsyncLMBase",
    "Backend",
    "BatchedAsyncLM",
    "LoraAdapter",
    "ModelState",
    "PrefixRequest",
    "Request",
    "sampling_args",
]

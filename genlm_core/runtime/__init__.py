"""The request path between a model's callers and its backend: batcher, gate, caches.

[`BatchedAsyncLM`][genlm_core.lm.BatchedAsyncLM] puts these together; use them directly to batch
anything else (the async tries do).
"""

from __future__ import annotations

from genlm_core.runtime._batcher import AutoBatcher
from genlm_core.runtime._cache import OutputCache, nbytes_of
from genlm_core.runtime._dispatch import DispatchPolicy
from genlm_core.runtime._gate import ComputeGate
from genlm_core.runtime._heap import (
    HeapTrimmer,
    freeze_heap,
    process_trimmer,
    thaw_heap,
    trim_heap,
    trimming_wanted,
)
from genlm_core.runtime._outcomes import BatcherStats, RequestFailure
from genlm_core.runtime._per_loop import LoopBatchers
from genlm_core.runtime._row_pool import RowPool, RowPoolStats, StackPool
from genlm_core.runtime._worker import WorkerThread

__all__ = [
    "AutoBatcher",
    "BatcherStats",
    "ComputeGate",
    "DispatchPolicy",
    "HeapTrimmer",
    "LoopBatchers",
    "OutputCache",
    "RequestFailure",
    "RowPool",
    "RowPoolStats",
    "StackPool",
    "WorkerThread",
    "freeze_heap",
    "nbytes_of",
    "process_trimmer",
    "thaw_heap",
    "trim_heap",
    "trimming_wanted",
]

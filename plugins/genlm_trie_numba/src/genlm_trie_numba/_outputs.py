"""Recycled memory for the ``(batch, nodes)`` mass arrays of batch trie queries.

Fresh large allocations cost page faults as long as the kernel (docs/tries.md): each
output is a pooled block that returns to its pool once unused.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from genlm_core.runtime import RowPool

#: Batch sizes whose pools are kept at once.
KEPT_SIZES = 2


class BatchOutputs:
    """Hands out ``(batch, width)`` arrays of ``dtype`` whose memory is recycled.

    ``width`` is the trie's node count; ``allocate`` makes a new block's memory (see
    [`RowPool`][genlm_core.runtime.RowPool]).
    """

    def __init__(
        self, width: int, dtype: type, allocate: Callable[[int], np.ndarray] | None = None
    ) -> None:
        self.width = width
        self.dtype = np.dtype(dtype)
        self._allocate = allocate
        self._pools: OrderedDict[int, RowPool] = OrderedDict()
        self._lock = threading.Lock()

    def empty(self, batch: int) -> np.ndarray:
        """An uninitialised ``(batch, width)`` array, from a recycled block if one is free."""
        with self._lock:
            pool = self._pools.get(batch)
            if pool is None:
                block_bytes = batch * self.width * self.dtype.itemsize
                pool = self._pools[batch] = RowPool(
                    batch * self.width,
                    max_free_bytes=block_bytes,
                    dtype=self.dtype,
                    allocate=self._allocate,
                )
                while len(self._pools) > KEPT_SIZES:
                    _, oldest = self._pools.popitem(last=False)
                    oldest.close()  # its live outputs stay valid
            else:
                self._pools.move_to_end(batch)
        (block,) = pool.empty_rows(1)
        return block.numpy().reshape(batch, self.width)

    def release(self) -> None:
        """Free every spare block (outputs still in use are untouched)."""
        with self._lock:
            for pool in self._pools.values():
                pool.release()

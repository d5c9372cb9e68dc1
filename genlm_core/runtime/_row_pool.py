"""RowPool: recycled memory for the per-request rows a backend returns.

A slot returns to the pool once nothing can read its row (docs/architecture.md, "The
row pool").
"""

from __future__ import annotations

import dataclasses
import functools
import mmap
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from genlm_core.checks import is_int_at_least


@dataclasses.dataclass(frozen=True)
class RowPoolStats:
    """A snapshot of a [`RowPool`][].

    Attributes:
        free_rows: Slots waiting for reuse.
        free_bytes: Their bytes.
        live_rows: Rows handed out whose memory is still in use somewhere.
        reused: Rows served from a recycled slot.
        allocated: Rows that needed new memory.
    """

    free_rows: int
    free_bytes: int
    live_rows: int
    reused: int
    allocated: int


class RowPool:
    """Hands out 1-D CPU tensors of one width whose memory is recycled.

    Args:
        width: Elements per row (the vocabulary size).
        max_free_bytes: Most bytes of free slots to keep: an integer, or a
            zero-argument function returning one (asked whenever a slot comes back).
        dtype: Element type of the rows (torch or numpy dtype; float32 by default).
        allocate: ``allocate(width)`` makes a new slot: a 1-D NumPy array of ``dtype``
            (default ``np.empty``, from 64 KiB a mapping; the CUDA trie's: page-locked).

    Example: ``RowPool(50257, max_free_bytes=64 << 20).copy_rows(batch)`` gives a list
    of ``(50257,)`` float32 tensors.

    Raises:
        ValueError: ``width`` is not an integer >= 1, or ``max_free_bytes`` is neither
            a non-negative integer nor callable.
    """

    def __init__(
        self,
        width: int,
        max_free_bytes: int | Callable[[], int],
        dtype: Any = np.float32,
        allocate: Callable[[int], np.ndarray] | None = None,
    ) -> None:
        if not is_int_at_least(width, 1):
            raise ValueError(f"width must be an integer >= 1, got {width!r}")
        if not callable(max_free_bytes) and not is_int_at_least(max_free_bytes, 0):
            raise ValueError(
                f"max_free_bytes must be an integer >= 0 or a function returning one, "
                f"got {max_free_bytes!r}"
            )
        if isinstance(dtype, torch.dtype):
            dtype = torch.empty((), dtype=dtype).numpy().dtype
        self.width = width
        self.dtype = np.dtype(dtype)
        self.row_bytes = width * self.dtype.itemsize
        self._max_free_bytes = max_free_bytes
        new = _mapped if self.row_bytes >= 64 << 10 else np.empty
        self._allocate = allocate or functools.partial(new, dtype=self.dtype)
        self._free: list[np.ndarray] = []
        # Data address of each live row's slot -> its lease (which must outlive the row).
        self._live: dict[int, _Lease] = {}
        # One bound method for every lease. It runs in whichever thread drops a row's
        # last user, maybe inside this pool's code (a collection): so no lock, only
        # list/dict operations, atomic in CPython.
        self._callback = self._give_back
        self._counter_lock = threading.Lock()
        self._closed = False
        self._reused = 0
        self._allocated = 0

    def copy_rows(self, batch: np.ndarray | torch.Tensor) -> list[torch.Tensor]:
        """Copy each row of a ``(n, width)`` numpy array or CPU tensor into its own pooled tensor.

        Raises:
            ValueError: ``batch`` has the wrong shape, dtype or device.
        """
        if isinstance(batch, torch.Tensor):
            if batch.device.type != "cpu":
                raise ValueError(
                    f"copy_rows needs a CPU tensor, got one on {batch.device}; call .cpu() first"
                )
            batch = batch.detach().numpy()
        if not isinstance(batch, np.ndarray) or batch.ndim != 2 or batch.shape[1] != self.width:
            raise ValueError(
                f"copy_rows needs a 2-D array of shape (n, {self.width}), got "
                f"{type(batch).__name__} of shape {getattr(batch, 'shape', None)}"
            )
        if batch.dtype != self.dtype:
            raise ValueError(
                f"copy_rows needs rows of dtype {self.dtype}, got {batch.dtype}; convert "
                f"the batch first (e.g. .astype({str(self.dtype)!r}))"
            )
        rows = self.empty_rows(len(batch))
        for row, values in zip(rows, batch, strict=True):
            np.copyto(row.numpy(), values)
            self.note_maximum(row)
        return rows

    def empty_rows(self, n: int) -> list[torch.Tensor]:
        """``n`` pooled rows with unspecified contents, to fill in place (``out=``)."""
        if not is_int_at_least(n, 0):
            raise ValueError(f"empty_rows needs a row count >= 0, got {n!r}")
        return [torch.from_numpy(self._lease(self._take())) for _ in range(n)]

    def note_maximum(self, row: torch.Tensor) -> None:
        """Read pooled ``row``'s largest entry now, while it is in cache; call after its last write.

        The model's row check takes it ([`take_maxima`][]) instead of reading the row
        again, cold (a 49k row: 5 us hot, about 20 cold). Rows not from this pool: ignored.
        """
        if (lease := self._lease_of(row)) is not None:
            lease.maximum = row_maximum(row)

    def take_maxima(self, rows: Sequence[torch.Tensor]) -> list[float | None]:
        """The maximum noted for each of ``rows`` (None where none), each taken only once."""
        out = []
        for row in rows:
            top = None
            if (lease := self._lease_of(row)) is not None:
                top, lease.maximum = lease.maximum, None
            out.append(top)
        return out

    def owns(self, row: torch.Tensor) -> bool:
        """Whether ``row`` is exactly one row this pool handed out (not a part of one)."""
        return self._lease_of(row) is not None

    def _lease_of(self, row: torch.Tensor) -> _Lease | None:
        """The lease of ``row`` if it is exactly one live row of this pool, else None."""
        lease = self._live.get(row.data_ptr())
        return lease if lease is not None and row.numel() == self.width else None

    def stats(self) -> RowPoolStats:
        """Counters and sizes right now."""
        free = len(self._free)
        return RowPoolStats(
            free_rows=free,
            free_bytes=free * self.row_bytes,
            live_rows=len(self._live),
            reused=self._reused,
            allocated=self._allocated,
        )

    def release(self) -> None:
        """Give every free slot back to the allocator (live rows are untouched)."""
        self._free.clear()

    def close(self) -> None:
        """Release free slots and keep none from now on (rows still live stay valid)."""
        self._closed = True
        self.release()

    def __repr__(self) -> str:
        s = self.stats()
        return (
            f"<RowPool width={self.width} dtype={self.dtype} free={s.free_rows} live={s.live_rows}>"
        )

    def _take(self) -> np.ndarray:
        try:
            slot = self._free.pop()
        except IndexError:  # none free (checked and popped at once: another thread may take)
            with self._counter_lock:
                self._allocated += 1
            return self._allocate(self.width)
        with self._counter_lock:
            self._reused += 1
        return slot

    def _lease(self, slot: np.ndarray) -> np.ndarray:
        view = slot.view()  # dies with the last storage that uses it
        lease = _Lease(view, self._callback)
        lease.slot = slot
        lease.address = slot.ctypes.data
        lease.maximum = None
        self._live[lease.address] = lease
        return view

    def _give_back(self, lease: _Lease) -> None:
        del self._live[lease.address]
        if self._closed:
            return
        limit = self._max_free_bytes
        if callable(limit):
            limit = limit()
        if (len(self._free) + 1) * self.row_bytes <= limit:
            self._free.append(lease.slot)


class StackPool:
    """``torch.stack`` of float32 CPU rows into recycled memory, for the latest row counts.

    A sampler stacks as many rows every step and drops the last step's tensor, whose
    memory comes back here: the next stack writes warm pages, where a fresh 50 MB
    tensor (256 x 49152) paid page faults of about 4x the copy. A shape is pooled from
    its second stack among the latest ones (calls of ever new shapes, as the byte-level
    LM's, stack as usual), and a result's memory is reused only once nothing reads it
    (a [`RowPool`][] slot per result).

    Args:
        max_free_bytes: Most bytes a free result may have to be kept.
        sizes: How many of the latest ``(rows, width)`` shapes keep one free result each.

    Raises:
        ValueError: ``max_free_bytes`` or ``sizes`` is not an integer in range.
    """

    def __init__(self, max_free_bytes: int, sizes: int = 2) -> None:
        if not is_int_at_least(max_free_bytes, 0) or not is_int_at_least(sizes, 1):
            raise ValueError(
                f"StackPool needs integers max_free_bytes >= 0 and sizes >= 1, got "
                f"max_free_bytes={max_free_bytes!r}, sizes={sizes!r}"
            )
        self._limit = max_free_bytes
        self._sizes = sizes
        self._pools: dict[tuple[int, int], RowPool] = {}  # by shape, latest last
        self._lock = threading.Lock()
        self._closed = False

    def stack(self, rows: Sequence[torch.Tensor]) -> torch.Tensor:
        """``torch.stack(rows)``; into pooled memory if they are 1-D float32 CPU rows."""
        first = rows[0] if len(rows) else None
        if first is None or first.dim() != 1 or not all(_f32_cpu(row) for row in rows):
            return torch.stack(rows)  # type: ignore[arg-type]  (its result, or its error)
        shape = (len(rows), first.numel())
        with self._lock:
            if self._closed:
                return torch.stack(rows)  # type: ignore[arg-type]
            pool = self._pools.pop(shape, None)
            n = shape[0] * shape[1]
            self._pools[shape] = pool or RowPool(
                n, functools.partial(self._one_free, n * 4), allocate=_heap_floats
            )
            while len(self._pools) > self._sizes:
                self._pools.pop(next(iter(self._pools))).close()
        if pool is None:  # a shape not asked for lately: remembered, stacked as usual
            return torch.stack(rows)  # type: ignore[arg-type]
        (slot,) = pool.empty_rows(1)
        try:
            return torch.stack(rows, out=slot.view(shape))  # type: ignore[arg-type]
        except RuntimeError:  # rows that do not stack into it (a shape apart)
            return torch.stack(rows)  # type: ignore[arg-type]

    def close(self) -> None:
        """Keep nothing from now on (results still in use stay valid)."""
        with self._lock:
            self._closed = True
            for pool in self._pools.values():
                pool.close()
            self._pools.clear()

    def _one_free(self, nbytes: int) -> int:
        """A pool's free bytes: one result of ``nbytes``, if that fits ``max_free_bytes``."""
        return nbytes if nbytes <= self._limit else 0


def _heap_floats(n: int) -> np.ndarray:
    """Memory as torch.stack's own result gets it.

    (NumPy's asks for huge pages, whose compaction stalled the loop up to 36 ms a 33 MB
    result, under THP's ``madvise`` setting.)
    """
    return torch.empty(n, dtype=torch.float32).numpy()


def row_maximum(row: torch.Tensor) -> float:
    """A CPU row's largest entry, NaN if it has one: NumPy's (5-8 us a hot 49k row; torch 14)."""
    return float(row.detach().numpy().max())


def _f32_cpu(row: torch.Tensor) -> bool:
    return row.dtype is torch.float32 and row.is_cpu  # (out= would cast other dtypes)


def _mapped(width: int, dtype: np.dtype) -> np.ndarray:
    """A slot off malloc's heap (cached rows left holes there); unmapped once freed."""
    return np.frombuffer(mmap.mmap(-1, width * dtype.itemsize), dtype=dtype)


class _Lease(weakref.ref):
    """A weak reference to a handed-out row's numpy view that carries its slot.

    One object per live row, not three: every cached row adds to the collector's scans.
    """

    __slots__ = ("address", "maximum", "slot")

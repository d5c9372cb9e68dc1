"""OutputCache: a thread-safe LRU of model outputs, bounded by entries and by bytes.

Sizes count tensors' ``nbytes`` (through tuples, lists, dict values) and each key's
token ids (docs/architecture.md, "The output cache's sizes"). A cached view keeps its
whole batch alive: store ``row.clone()`` when the byte budget matters.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from genlm_core.checks import is_int_at_least

_MISSING = object()


def nbytes_of(value: Any) -> int:
    """Bytes held by ``value``'s tensors/arrays (``nbytes``), through tuples, lists, dicts."""
    n = getattr(value, "nbytes", None)
    if isinstance(n, int):
        return n
    if isinstance(value, tuple | list):
        return sum(nbytes_of(v) for v in value)
    if isinstance(value, dict):
        return sum(nbytes_of(v) for v in value.values())
    return 0


#: A tuple key this long or shorter is a record (a request: token ids, adapter, ...)
#: whose fields are counted; a longer one is a flat sequence, counted as one tuple.
_RECORD_FIELDS = 8


def key_nbytes(key: Any) -> int:
    """Bytes a cache key holds: itself and, for a record, its tuple and string fields.

    A [`Request`][genlm_core.lm.Request] counts its token-id tuple, not the int objects
    (shared by Python and by the keys of a prompt's prefixes): constant time.
    """
    size = sys.getsizeof(key)
    if isinstance(key, tuple) and len(key) <= _RECORD_FIELDS:
        for field in key:
            if isinstance(field, tuple | str | bytes):
                size += sys.getsizeof(field)
    return size


def _check_limit(name: str, value: int | None) -> None:
    if value is not None and not is_int_at_least(value, 0):
        raise ValueError(f"{name} must be None or an integer >= 0, got {value!r}")


class OutputCache:
    """Least-recently-used cache bounded by entry count and, optionally, by bytes.

    Args:
        max_entries: Most entries kept (None: no entry limit; 0 stores nothing).
            Positional, so genlm-backend's ``OutputCache(maxsize)`` keeps working.
        max_bytes: Most bytes of tensors/arrays and keys kept (None: no byte limit).
            A single entry bigger than this is not stored.
        maxsize: genlm-backend's name for ``max_entries``.
        move_to_cpu: Store tensors on the CPU and move them back to their original
            device when read (genlm-backend's option, to spare GPU memory).

    Raises:
        ValueError: A limit is not None or an integer >= 0, or both ``max_entries``
            and ``maxsize`` are given.
    """

    def __init__(
        self,
        max_entries: int | None = None,
        *,
        max_bytes: int | None = None,
        maxsize: int | None = None,
        move_to_cpu: bool = False,
    ) -> None:
        if maxsize is not None:
            if max_entries is not None:
                raise ValueError(
                    f"pass max_entries or its alias maxsize, not both (got max_entries="
                    f"{max_entries!r}, maxsize={maxsize!r})"
                )
            max_entries = maxsize
        _check_limit("max_entries", max_entries)
        _check_limit("max_bytes", max_bytes)
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.move_to_cpu = bool(move_to_cpu)
        # key -> value in LRU order; sizes and devices beside it (no tuple per entry).
        self._data: OrderedDict[Hashable, Any] = OrderedDict()
        self._sizes: dict[Hashable, int] = {}
        self._devices: dict[Hashable, Any] = {}
        self._lock = threading.Lock()
        self._nbytes = 0
        self.hits = 0
        self.misses = 0

    @property
    def maxsize(self) -> int | None:
        """genlm-backend's name for [`max_entries`][]."""
        return self.max_entries

    @property
    def nbytes(self) -> int:
        """Bytes of the tensors/arrays and keys currently stored."""
        return self._nbytes

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The value for ``key`` (now the most recently used), or ``default``."""
        with self._lock:
            value = self._data.get(key, _MISSING)
            if value is _MISSING:
                self.misses += 1
                return default
            self._data.move_to_end(key)
            self.hits += 1
            device = self._devices.get(key)
        return _restore(value, device)

    def __getitem__(self, key: Hashable) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __setitem__(self, key: Hashable, value: Any) -> None:
        device = None
        if self.move_to_cpu and hasattr(value, "device") and hasattr(value, "cpu"):
            device, value = value.device, value.cpu()
        size = nbytes_of(value) + key_nbytes(key)
        with self._lock:
            old = self._remove(key)
            if (self.max_bytes is not None and size > self.max_bytes) or self.max_entries == 0:
                return  # could never fit; the stale old value is gone too
            self._data[key] = value
            self._sizes[key] = size
            if device is not None:
                self._devices[key] = device
            self._nbytes += size
            evicted = self._evict()
        del evicted, old  # dropped values die here, after the sizes are updated

    def __delitem__(self, key: Hashable) -> None:
        with self._lock:
            if key not in self._data:
                raise KeyError(key)
            value = self._remove(key)
        del value

    def pop(self, key: Hashable, default: Any = None) -> Any:
        """Remove ``key`` and return its value, or ``default`` when absent."""
        with self._lock:
            device = self._devices.get(key)
            value = self._remove(key, _MISSING)
        if value is _MISSING:
            return default
        return _restore(value, device)

    def remove_if(self, predicate: Callable[[Hashable], bool]) -> int:
        """Remove every entry whose key satisfies ``predicate``; return how many."""
        with self._lock:
            doomed = [k for k in self._data if predicate(k)]
            dropped = [self._remove(k) for k in doomed]
        del dropped  # the values die here, after the sizes are updated
        return len(doomed)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def keys(self) -> list[Hashable]:
        """A snapshot of the keys, least recently used first."""
        with self._lock:
            return list(self._data)

    def clear(self) -> None:
        """Drop every entry (the hit/miss counters are kept)."""
        with self._lock:
            dropped, self._data = self._data, OrderedDict()
            self._sizes, self._devices = {}, {}
            self._nbytes = 0
        dropped.clear()  # the values die here, after the sizes are updated

    def __repr__(self) -> str:
        return (
            f"<OutputCache {len(self._data)} entries, {self._nbytes} bytes, "
            f"max_entries={self.max_entries}, max_bytes={self.max_bytes}, "
            f"hits={self.hits}, misses={self.misses}>"
        )

    # -- internals. Dropped values are released outside the lock: a finalizer (RowPool's)
    # may read this cache's size.

    def _remove(self, key: Hashable, default: Any = None) -> Any:
        """Unlink ``key`` and return its value (lock held)."""
        value = self._data.pop(key, _MISSING)
        if value is _MISSING:
            return default
        self._nbytes -= self._sizes.pop(key)
        if self._devices:
            self._devices.pop(key, None)
        return value

    def _evict(self) -> list[Any]:
        """Remove least-recently-used entries until within both limits; return them (lock held)."""
        data = self._data
        evicted = []
        while (self.max_entries is not None and len(data) > self.max_entries) or (
            self.max_bytes is not None and self._nbytes > self.max_bytes
        ):
            evicted.append(self._remove(next(iter(data))))
        return evicted


def _restore(value: Any, device: Any) -> Any:
    """A stored value, moved back to its original device (``move_to_cpu``) if it had one."""
    return value if device is None else value.to(device)

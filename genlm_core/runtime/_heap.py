"""Trimming (``malloc_trim``) and freezing the heap: docs/architecture.md ("Heap trimming")."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys
import threading
import time

from genlm_core import settings


def _load_malloc_trim():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim  # glibc only (musl has no malloc_trim)
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_MALLOC_TRIM = _load_malloc_trim()


def trim_heap() -> bool:
    """Return free heap pages to the OS now; False where that is not supported."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True


class HeapTrimmer:
    """Calls [`trim_heap`][] from [`maybe_trim`][] at most once per ``interval``.

    Args:
        interval: Least seconds between two trims (0: trim on every call).
        enabled: False makes [`maybe_trim`][] a no-op (e.g. a user who tunes the
            allocator with ``MALLOC_ARENA_MAX`` or jemalloc themselves).
    """

    def __init__(self, interval: float = 0.5, *, enabled: bool = True) -> None:
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or interval < 0:
            raise ValueError(f"interval must be a number of seconds >= 0, got {interval!r}")
        self.interval = float(interval)
        self.enabled = bool(enabled) and _MALLOC_TRIM is not None
        self.trims = 0
        self._last = -float("inf")
        self._lock = threading.Lock()

    def maybe_trim(self) -> bool:
        """Trim if enabled and ``interval`` has passed since the last trim."""
        if not self.enabled:
            return False
        now = time.monotonic()
        with self._lock:
            if now - self._last < self.interval:
                return False
            self._last = now
        trim_heap()
        self.trims += 1
        return True


_process_trimmer: HeapTrimmer | None = None
_process_lock = threading.Lock()


def process_trimmer() -> HeapTrimmer:
    """The one trimmer every model of this process shares (at most a trim per 0.5 s)."""
    global _process_trimmer
    with _process_lock:
        if _process_trimmer is None:
            _process_trimmer = HeapTrimmer(interval=0.5)
        return _process_trimmer


def trimming_wanted(option: bool | None, default: bool) -> bool:
    """Whether a model trims: its ``trim_heap=`` option, else ``GENLM_TRIM_HEAP``, else ``default``.

    Raises:
        ValueError: ``option`` is not a bool or None, or the variable is unreadable.
    """
    if option is not None:
        if not isinstance(option, bool):
            raise ValueError(f"trim_heap must be True, False or None, got {option!r}")
        return option
    from_env = settings.trim_heap()
    return default if from_env is None else from_env


_frozen = False  # whether what is frozen was frozen by freeze_heap


def freeze_heap() -> None:
    """``gc.freeze()``, unless the program froze the heap first (then it is the program's)."""
    global _frozen
    if _frozen or not gc.get_freeze_count():
        gc.freeze()
        _frozen = True


def thaw_heap() -> None:
    """``gc.unfreeze()`` if [`freeze_heap`][] froze: objects dead in cycles can then go."""
    global _frozen
    if _frozen:
        _frozen = False
        gc.unfreeze()

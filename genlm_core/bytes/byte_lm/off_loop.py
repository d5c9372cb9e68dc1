"""Running the byte states' heavy synchronous work off the event loop.

Building a canonical filter or a byte trie for a 128k-token vocabulary takes seconds,
a filter's first masks tenths of one: run on the event loop they freeze every other
coroutine of the program (other particles, a server's requests, timeouts).

* :func:`build_once`: a build in a worker thread, shared by everyone asking for the
  same key meanwhile (two ``initial`` calls at once build once and get one object),
  from any event loop or thread.
* :func:`locked`: a call on a canonical filter in a worker thread, holding the
  filter's lock (its caches are not thread-safe; every call on a shared filter from
  the byte states goes through here).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

__all__ = ["build_once", "locked"]

T = TypeVar("T")

_BUILDS = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="genlm-bytes-build")
_PENDING: dict[Hashable, concurrent.futures.Future[Any]] = {}
_PENDING_LOCK = threading.Lock()
_LOCKS: weakref.WeakKeyDictionary[Any, threading.Lock] = weakref.WeakKeyDictionary()
_LOCKS_LOCK = threading.Lock()


async def build_once(key: Hashable, build: Callable[[], T]) -> T:
    """``build()`` in a worker thread; callers asking for ``key`` meanwhile share it.

    ``build`` should store what it makes in its registry (later callers find it there
    and need not come here). A caller cancelled while waiting does not cancel the build.
    """
    with _PENDING_LOCK:
        future = _PENDING.get(key)
        if future is None:
            future = _PENDING[key] = _BUILDS.submit(_run, key, build)
    return await asyncio.shield(asyncio.wrap_future(future))


def _run(key: Hashable, build: Callable[[], T]) -> T:
    try:
        return build()
    finally:
        with _PENDING_LOCK:
            _PENDING.pop(key, None)


def lock_of(obj: Any) -> threading.Lock:
    """The lock of a shared object (a canonical filter), made on first use."""
    with _LOCKS_LOCK:
        lock = _LOCKS.get(obj)
        if lock is None:
            lock = _LOCKS[obj] = threading.Lock()
        return lock


async def locked(obj: Any, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a worker thread, holding ``obj``'s lock (see module doc)."""
    lock = lock_of(obj)

    def call() -> T:
        with lock:
            return fn(*args)

    return await asyncio.to_thread(call)

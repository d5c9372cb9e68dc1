"""What the byte states build once per model and share: tries, filters, their builds.

One registry ([`shared`][], [`shared_async`][]) per model, held weakly, per key; a
build runs once for everyone asking meanwhile, in a worker thread for the async form.
[`locked`][] calls a shared filter off the event loop under its lock (docs/bytes-design.md,
*The event loop*).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import numpy as np

from genlm_core.runtime import freeze_heap, thaw_heap
from genlm_core.tokenization.token import gc_paused
from genlm_core.trie import AsyncTokenByteTrie
from genlm_trie_numba.byte_trie import TokenByteTrie

__all__ = [
    "is_shared",
    "locked",
    "shared",
    "shared_async",
    "shared_exact_trie_async",
    "shared_trie_async",
]

T = TypeVar("T")

_BUILDS = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="genlm-bytes-build")
_SHARED: weakref.WeakKeyDictionary[Any, dict[Hashable, Any]] = weakref.WeakKeyDictionary()
_PENDING: dict[tuple[int, Hashable], concurrent.futures.Future[Any]] = {}
_LOCK = threading.Lock()  # guards the two above


def shared(llm: Any, key: Hashable | None, build: Callable[[], T]) -> T:
    """What ``build()`` makes for ``llm`` and ``key``: built once, kept while ``llm`` lives.

    Callers meanwhile wait for the same build; ``key`` None builds an unshared copy.
    """
    if key is None:
        return build()
    found, future, mine = _claim(llm, key)
    if found is not None:
        return found
    if mine:
        _build_into(future, llm, key, build)
    return future.result()


async def shared_async(llm: Any, key: Hashable | None, build: Callable[[], T]) -> T:
    """[`shared`][], built in a worker thread; a cancelled caller does not cancel the build."""
    if key is None:
        return await asyncio.wrap_future(_BUILDS.submit(build))
    found, future, mine = _claim(llm, key)
    if found is not None:
        return found
    if mine:
        _BUILDS.submit(_build_into, future, llm, key, build)
    return await asyncio.shield(asyncio.wrap_future(future))


def is_shared(obj: Any) -> bool:
    """Whether ``obj`` is in the registry (kept alive for other states: do not close it)."""
    with _LOCK:
        return any(obj is v for per_model in list(_SHARED.values()) for v in per_model.values())


def _claim(llm: Any, key: Hashable) -> tuple[Any, concurrent.futures.Future[Any], bool]:
    """``(stored, None, False)``, else the build's future and whether it is the caller's."""
    with _LOCK:
        try:
            found = _SHARED.get(llm, {}).get(key)
        except TypeError:  # a model that takes no weak reference: nothing stored
            found = None
        if found is not None:
            return found, None, False
        future = _PENDING.get((id(llm), key))
        if future is not None:
            return None, future, False
        future = _PENDING[id(llm), key] = concurrent.futures.Future()
        return None, future, True


def _build_into(future: concurrent.futures.Future[Any], llm: Any, key: Hashable, build: Any):
    try:
        with gc_paused():  # no collection (of the whole heap) pauses the loop meanwhile,
            made = build()
            freeze_heap()  # nor do later ones scan what it built, or what existed before
    except BaseException as error:
        with _LOCK:
            _PENDING.pop((id(llm), key), None)
        future.set_exception(error)
        return
    with _LOCK:
        _PENDING.pop((id(llm), key), None)
        try:
            if llm not in _SHARED:  # frozen, what it built (cycles) goes only when thawed
                weakref.finalize(llm, thaw_heap)
            _SHARED.setdefault(llm, {})[key] = made
        except TypeError:  # a model that takes no weak reference: not shared
            pass
    future.set_result(made)


def _beam_trie(llm: Any, eos_byte_strings: set[bytes], trie_opts: dict[str, Any] | None):
    """The registry key of the beam's trie for these options, and its build."""
    opts = {**(trie_opts or {}), "eos_byte_strings": set(eos_byte_strings)}
    try:
        key = ("beam trie", frozenset((name, _hashable(v)) for name, v in opts.items()))
    except TypeError:  # options that cannot be a key: a trie of their own
        key = None
    return key, lambda: AsyncTokenByteTrie.from_vocab(llm.byte_vocab, **opts)


def _hashable(value: Any) -> Hashable:
    if isinstance(value, set):
        return frozenset(value)
    if isinstance(value, list):
        return tuple(value)
    hash(value)  # raises TypeError for what cannot be a key
    return value


async def shared_trie_async(
    llm: Any, eos_byte_strings: set[bytes], trie_opts: dict[str, Any] | None = None
) -> AsyncTokenByteTrie:
    """The beam's trie of ``llm``'s vocabulary (``trie_opts``: ``from_vocab`` options)."""
    return await shared_async(llm, *_beam_trie(llm, eos_byte_strings, trie_opts))


async def shared_exact_trie_async(llm: Any, eos_byte_strings: set[bytes]) -> AsyncTokenByteTrie:
    """The exact state's float64 trie for these EOS strings, sharing the beam's trie's arrays.

    The beam's trie is awaited here, not in the build: builds waiting on builds could
    fill every worker.
    """
    beam = await shared_trie_async(llm, eos_byte_strings)

    def build() -> AsyncTokenByteTrie:
        base = beam.trie
        if type(base) is not TokenByteTrie:
            base = TokenByteTrie(llm.byte_vocab, eos_byte_strings=set(eos_byte_strings))
        return AsyncTokenByteTrie(base.with_dtype(np.float64))

    return await shared_async(llm, ("exact trie", frozenset(eos_byte_strings)), build)


async def locked(obj: Any, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a worker thread, holding ``obj``'s lock (see module doc)."""
    lock = shared(obj, "lock", threading.Lock)  # the registry holds it while obj lives

    def call() -> T:
        with lock:
            return fn(*args)

    return await asyncio.to_thread(call)

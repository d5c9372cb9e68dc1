"""``AsyncTokenCharacterTrie``: concurrent ``await weight_sum(ws)`` calls, batched.

Bad input of one caller fails only that caller; an error of the batch reaches all of
its callers (docs/tries.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Self

import numpy as np

from genlm_core.runtime import LoopBatchers, RequestFailure
from genlm_core.trie.errors import InvalidWeightsError
from genlm_core.trie.protocols import CharacterTrie, TrieMode
from genlm_core.trie.weights import as_batch

__all__ = ["AsyncTokenByteTrie", "AsyncTokenCharacterTrie"]


@dataclass(eq=False, slots=True)
class _Request:
    """One caller's request. Hashed by identity (``eq=False``): weights are not hashable."""

    op: Hashable
    ws: Any


class AsyncTokenCharacterTrie:
    """Batch concurrent ``weight_sum``/``weight_max`` requests over one trie.

    Args:
        trie: Any [`CharacterTrie`][genlm_core.trie.protocols.CharacterTrie] (e.g. a
            [`ReferenceTokenCharacterTrie`][genlm_core.trie.ReferenceTokenCharacterTrie],
            or genlm-trie-numba's ``TokenCharacterTrie``).
        max_batch_size: Most distributions computed in one batch call.
        max_wait: Seconds the first request of a batch may wait for company; by
            default a batch is dispatched once every runnable caller has queued.

    Example::

        trie = AsyncTokenCharacterTrie.from_vocab(lm.byte_vocab)
        masses = await asyncio.gather(*(trie.weight_sum(p) for p in probs))
        await trie.cleanup()
    """

    #: The registry kind ``from_vocab`` picks from.
    _trie_kind = "character"

    def __init__(self, trie: CharacterTrie, *, max_batch_size: int = 64, max_wait: float = 0.0):
        self.trie = trie
        self.max_batch_size = max_batch_size
        self.max_wait = max_wait
        self._batchers = LoopBatchers(
            self._run_batch,
            name=f"{type(self).__name__}({type(trie).__name__})",
            max_batch_size=max_batch_size,
            max_wait=max_wait,
        )

    @classmethod
    def from_vocab(cls, vocab: Sequence[Any], backend: str | None = None, **kwargs: Any) -> Self:
        """Build a trie over ``vocab`` with a registered implementation and wrap it.

        Args:
            vocab: The vocabulary (``lm.byte_vocab``).
            backend: A registered trie name of this class's kind (``genlm backends``
                lists them; character tries: the core's ``reference``, genlm-trie-numba's
                ``numba`` and genlm-backend's ``sequential`` and ``parallel``,
                genlm-trie-torch's ``torch-cuda``; byte tries: genlm-trie-numba's
                ``numba-byte``), or None for the best available one.
            **kwargs: Passed to the trie's constructor (e.g. ``device=``, or
                ``eos_byte_strings=`` for a byte trie).

        Raises:
            UnknownBackendError: No implementation is registered as ``backend``
                (a ``ValueError``, as in genlm-backend, and a ``KeyError``).
            BackendUnavailableError: It is registered but cannot run here.
        """
        from genlm_core.plugins import TrieRegistry, get_plugin_manager

        registration = TrieRegistry(get_plugin_manager()).pick(cls._trie_kind, backend)
        return cls(registration.spec.load()(vocab, **kwargs))

    async def weight_sum(self, ws: Any) -> np.ndarray:
        """Queue a ``weight_sum`` of ``ws``; concurrent calls are computed as one batch."""
        return await self._submit("sum", ws)

    async def weight_max(self, ws: Any) -> np.ndarray:
        """Queue a ``weight_max`` of ``ws``; concurrent calls are batched."""
        return await self._submit("max", ws)

    def start(self) -> None:
        """Start batching on the running event loop (optional: the first request does).

        Raises:
            RuntimeError: Called outside a running event loop (from sync code).
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                f"{type(self).__name__}.start() must be called from async code (inside a "
                f"running event loop); requests (await trie.weight_sum(ws)) start it anyway"
            ) from None
        self._batchers.get()

    async def cleanup(self) -> None:
        """Stop batching: queued requests fail, the running batch finishes.

        Idempotent. A later request starts a fresh batcher, as in genlm-backend.
        """
        await self._batchers.aclose()

    def shutdown(self) -> None:
        """Synchronous [`cleanup`][] (does not wait for the running batch)."""
        self._batchers.close()

    async def _submit(self, op: Hashable, ws: Any) -> Any:
        return await self._batchers.get().submit(_Request(op, ws))

    def _compute(self, op: Hashable, batch: list[Any]) -> Any:
        """One batch call of the trie for requests of operation ``op``."""
        if op == "sum":
            return self.trie.batch_weight_sum(batch)
        return self.trie.batch_weight_max(batch)

    def _run_batch(self, requests: list[_Request]) -> list[Any]:
        results: list[Any] = [None] * len(requests)
        groups: dict[Hashable, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault(r.op, []).append(i)
        for op, idx in groups.items():
            try:
                masses = self._compute(op, [requests[i].ws for i in idx])
            except InvalidWeightsError:
                if len(idx) == 1:
                    raise
                masses = [self._one(op, requests[i].ws) for i in idx]
            for i, m in zip(idx, masses, strict=True):
                results[i] = m
        return results

    def _one(self, op: Hashable, ws: Any) -> Any:
        try:
            return self._compute(op, [ws])[0]
        except InvalidWeightsError as exc:
            return RequestFailure(exc)  # fails this request alone

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.trie!r})"


class AsyncTokenByteTrie(AsyncTokenCharacterTrie):
    """genlm-bytes' ``AsyncTokenByteTrie``: batches requests per (operation, mode).

    Arguments as [`AsyncTokenCharacterTrie`][]'s; ``trie`` is a
    byte trie (genlm-trie-numba's ``TokenByteTrie``).
    """

    _trie_kind = "byte"

    async def weight_sum(self, ws: Any, mode: Any = None) -> Any:  # type: ignore[override]
        """Queue a ``weight_sum`` in ``mode`` (default ``TrieMode.WITHOUT_EOS``)."""
        return await self._submit(("sum", mode or TrieMode.WITHOUT_EOS), ws)

    async def weight_max(self, ws: Any) -> Any:
        """Queue a ``weight_max``: a float32 tensor of shape ``(num_nodes,)``."""
        return await self._submit(("max", None), ws)

    async def log_weight_sum(self, logps: Any, mode: Any = None) -> np.ndarray:
        """``log(weight_sum(exp(logps), mode))``: log-masses from log-probabilities.

        Concurrent calls (a beam step's states) are one exp, one kernel call and one
        log, in the worker thread. Returns a float64 array of shape ``(num_nodes,)``
        (``-inf`` where the mass is 0), its own: float64 logs keep the float32 sums'
        precision (a float32 log near ``e**-40`` would be off by up to 4e-6).
        """
        return await self._submit(("logsum", mode or TrieMode.WITHOUT_EOS), logps)

    def _compute(self, op: Hashable, batch: list[Any]) -> Any:
        kind, mode = op  # type: ignore[misc]
        if kind == "sum":
            return self.trie.batch_weight_sum(batch, mode=mode)
        if kind == "logsum":
            ws = np.exp(as_batch(batch, len(self.trie.decode), "log_weight_sum"))
            masses = self.trie.batch_weight_sum(ws, mode=mode).numpy()
            with np.errstate(divide="ignore"):
                return [np.log(row, dtype=np.float64) for row in masses]
        if kind == "max":
            return self.trie.batch_weight_max(batch)
        raise ValueError(f"unknown trie operation {kind!r}; expected 'sum', 'logsum' or 'max'")

"""BatchedAsyncLM: an AsyncLMBase whose calls go through the shared batcher and caches.

docs/architecture.md ("A request's path") names every step of a call in order.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from typing import Any

import torch

from genlm_core.checks import is_int_at_least, is_seconds
from genlm_core.lm import _rows
from genlm_core.lm._backend import Backend, checked_backend
from genlm_core.lm._base import AsyncLMBase, ModelState
from genlm_core.lm._options import accepted_options, unknown_option_error
from genlm_core.lm._requests import PrefixRequest, Request
from genlm_core.lm._rows import RowComputation, raise_failures
from genlm_core.runtime import (
    LoopBatchers,
    OutputCache,
    RowPool,
    StackPool,
    process_trimmer,
    trimming_wanted,
)

#: Default byte budget of [`BatchedAsyncLM`][]'s output cache (256 MiB). An entry
#: bound alone would let memory grow with the vocabulary: 4096 rows are 0.8 GiB for
#: GPT-2's 50k tokens, 2 GiB for Llama-3's 128k.
DEFAULT_CACHE_BYTES = 256 << 20

#: The batcher variant that hands rows out uncopied, to callers that stack them at once
#: (one copy a row, not two: see ``_filled``).
STACKING = "stacking"

#: Keyword options [`AsyncLMBase`][] itself takes (what ``**kwargs`` may carry to it).
_BASE_OPTIONS = frozenset({"vocab_size", "byte_vocab"})


class BatchedAsyncLM(AsyncLMBase):
    """An AsyncLMBase whose calls go through the shared AutoBatcher and OutputCache.

    Give it a ``backend`` ([`Backend`][genlm_core.lm.Backend]: an object with
    ``compute_batch``), or subclass it and implement [`compute_batch`][]. That runs
    off the event loop, receives unique validated requests, and returns one
    log-probability tensor per request. The core runs one [`compute_batch`][] at a
    time (unless ``thread_safe``), checks every row it returns, caches it, and hands
    each caller a copy of its own.

    Args:
        backend: What computes rows (default: this object, whose subclass implements
            [`compute_batch`][]); its optional hooks are used when present.
        batch_size: Most requests per batch (default [`default_batch_size`][]).
        max_wait: Seconds a batch may wait for more callers, counted from its first
            request (default 0: dispatch as soon as the event loop has no more runnable
            callers).
        cache_size: Most cached outputs (0 disables the cache).
        cache_bytes: Byte budget of the cached outputs, rows and their keys' token ids
            (default [`DEFAULT_CACHE_BYTES`][]); None bounds them by ``cache_size``
            alone.
        timeout: genlm-backend's name for ``max_wait`` (accepted for migration; give
            one of the two).
        trim_heap: Return freed heap memory to the OS after batches
            ([`HeapTrimmer`][genlm_core.runtime.HeapTrimmer]). None: ``GENLM_TRIM_HEAP``, else
            [`trims_heap_by_default`][].
        row_device: Where [`compute_batch`][]'s rows, and so callers' rows, live: the
            CPU (default), or the GPU of a backend that keeps log-probs there.
        **kwargs: Passed to [`AsyncLMBase`][] (``vocab_size``, ``byte_vocab``).

    Raises:
        InvalidOptionError: An option no class of the model takes (names the valid ones).
        ValueError: An option with a bad value (named, with the value).
    """

    #: ``batch_size`` when none is given: 64 for a backend that runs one padded forward
    #: per batch (its keys and values are assembled in memory, and past ~64 rows a CPU
    #: forward gains little per row). Engine backends set more.
    default_batch_size: int = 64
    #: Whether models of this class trim the heap unless told otherwise: True only
    #: where it was measured to keep resident memory within the cache budgets.
    trims_heap_by_default: bool = False

    def __init__(
        self,
        tokenizer: Any,
        *,
        backend: Backend | None = None,
        batch_size: int | None = None,
        max_wait: float | None = None,
        cache_size: int = 4096,
        cache_bytes: int | None = DEFAULT_CACHE_BYTES,
        timeout: float | None = None,
        trim_heap: bool | None = None,
        row_device: str | torch.device = "cpu",
        **kwargs: Any,
    ) -> None:
        own = type(self).compute_batch is not BatchedAsyncLM.compute_batch
        if backend is not None and own:
            raise TypeError(
                f"{type(self).__name__} computes its own rows (it implements compute_batch); "
                f"backend= is for BatchedAsyncLM itself: BatchedAsyncLM(tokenizer, backend=...)"
            )
        if backend is None and not own:
            raise TypeError(
                f"{type(self).__name__} has nothing to compute with: pass backend=, an "
                f"object with compute_batch(requests) (genlm_core.lm.Backend), or "
                f"implement compute_batch in a subclass"
            )
        #: What computes the rows: a [`Backend`][genlm_core.lm.Backend], or this model.
        self.backend: Any = self if backend is None else checked_backend(backend)
        if backend is not None:
            self.thread_safe = bool(getattr(backend, "thread_safe", False))
            self.max_positions = getattr(backend, "max_positions", None)
        for option in kwargs:
            if option not in _BASE_OPTIONS:
                valid = accepted_options(type(self)) or sorted(_BASE_OPTIONS)
                raise unknown_option_error(type(self).__name__, option, valid)
        if batch_size is None:
            batch_size = self.default_batch_size
        if not is_int_at_least(batch_size, 1):
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        if not is_int_at_least(cache_size, 0):
            raise ValueError(
                f"cache_size must be an integer >= 0 (0 disables the cache), got {cache_size!r}"
            )
        self.trims_heap = trimming_wanted(trim_heap, self.trims_heap_by_default)
        self.max_wait = _max_wait(max_wait, timeout)
        self.cache: OutputCache | None = (
            OutputCache(max_entries=cache_size, max_bytes=cache_bytes) if cache_size else None
        )
        super().__init__(tokenizer, **kwargs)
        self.row_device = torch.device(row_device)
        self.batch_size = batch_size
        #: Recycled memory for [`compute_batch`][]'s rows (``self.row_pool.copy_rows(batch)``).
        self.row_pool = RowPool(len(self.byte_vocab), max_free_bytes=self._free_row_bytes)
        #: Recycled memory for batch calls' results: a sampler asks for as many rows each
        #: step (one free result for each of the two latest shapes, up to 256 MiB each).
        self._stacks = StackPool(max_free_bytes=DEFAULT_CACHE_BYTES)
        #: The process's heap trimmer, used after batches when [`trims_heap`][] is on.
        self.heap_trimmer = process_trimmer()
        self._computation = RowComputation(
            self,
            gate=self._gate,
            adapters=self._adapters,
            cache=self.cache,
            row_pool=self.row_pool,
            stacks=self._stacks,
            row_device=self.row_device,
            width=len(self.byte_vocab),
            trimmer=self.heap_trimmer if self.trims_heap else None,
        )
        # A batcher per event loop (one per asyncio.run) over one worker thread: what
        # init_worker_thread and the libraries set up in it is kept between runs.
        self._loop_batchers = LoopBatchers(
            functools.partial(self._computation.run, for_callers=True),
            name=f"{type(self).__name__}.batcher",
            initializer=self.init_worker_thread,
            variants={STACKING: (self._computation.run, {"copy_result": None})},
            max_batch_size=batch_size,
            max_wait=self.max_wait,
            copy_result=_rows.private,
            closed_error=self._closed_error,
        )

    def compute_batch(self, requests: list[Request]) -> Sequence[torch.Tensor]:
        """Compute log-probabilities for distinct, validated requests (in a worker thread).

        A subclass implements it; by default the [`backend`][]'s.

        Returns:
            One float32 tensor of shape ``(len(byte_vocab),)`` on [`row_device`][]
            per request, in order.
        """
        return self.backend.compute_batch(requests)

    def init_worker_thread(self) -> None:
        """Called once in the model's worker thread before its first batch.

        Override to set thread-local state for [`compute_batch`][] (genlm-hf sets the
        thread's torch threads); the model keeps that thread for every event loop. By
        default the [`backend`][]'s, if it has one.
        """
        if (init := self._backend_hook("init_worker_thread")) is not None:
            init()

    def compute_prefix_batch(
        self, requests: list[PrefixRequest]
    ) -> Sequence[Sequence[torch.Tensor]]:
        """Optional: log-probs after every prefix of each request, one forward each.

        Override it when the model can compute all positions of a sequence at once;
        [`prefix_next_token_logprobs`][] then sends each sequence here whole. Runs in
        the worker thread; each row is cached under its prefix's [`Request`][].

        Returns:
            Per request, one float32 tensor of shape ``(len(byte_vocab),)`` per prefix
            ending at position ``start`` or later (or one tensor of shape
            ``(len(token_ids) - start, vocab)``). By default the [`backend`][]'s.
        """
        return self.backend.compute_prefix_batch(requests)

    @property
    def computes_prefixes_in_one_forward(self) -> bool:
        """Whether this model, or its backend, implements [`compute_prefix_batch`][]."""
        if self.backend is not self:
            return self._backend_hook("compute_prefix_batch") is not None
        return type(self).compute_prefix_batch is not BatchedAsyncLM.compute_prefix_batch

    def _adapter_hooks(self) -> Any:
        if self.backend is not self:
            return self.backend if self._backend_hook("load_adapter") is not None else None
        return super()._adapter_hooks()

    def _backend_hook(self, name: str) -> Any:  # a backend object's optional hook, or None
        return getattr(self.backend, name, None) if self.backend is not self else None

    def _batcher(self, variant: str | None = None) -> Any:
        """The running event loop's batcher (see `genlm_core.runtime.LoopBatchers`)."""
        self._check_open()  # no new batcher (and thread) for a closed model
        return self._loop_batchers.get(variant)

    async def next_token_logprobs(
        self, token_ids: Sequence[int], lora_name: str | None = None
    ) -> torch.Tensor:
        """Log-probabilities of the next token, batched with concurrent callers."""
        req = self.make_request(token_ids, lora_name)
        if self.cache is not None:
            hit = self.cache.get(req)
            if hit is not None:
                return _rows.private(hit)
        return await self._batcher().submit(req)  # the caller's own (see RowComputation.run)

    def next_token_logprobs_sync(
        self, token_ids: Sequence[int], lora_name: str | None = None
    ) -> torch.Tensor:
        """Log-probabilities of the next token, computed in the calling thread."""
        return self.batch_next_token_logprobs_sync([token_ids], lora_name)[0]

    async def batch_next_token_logprobs(
        self,
        token_ids_list: Sequence[Sequence[int]],
        lora_name: str | None = None,
        *,
        cache: bool = True,
    ) -> torch.Tensor:
        """Log-probabilities for several prompts, submitted to the batcher together.

        ``cache=False``: computed rows stay out of the output cache (rows read once).
        """
        reqs = self.make_requests(token_ids_list, lora_name)
        return await self._filled(reqs, self._cached(reqs), cache) if reqs else self._no_rows()

    def batch_next_token_logprobs_sync(
        self, token_ids_list: Sequence[Sequence[int]], lora_name: str | None = None
    ) -> torch.Tensor:
        """Synchronous batch, deduplicated and cached like the async path."""
        reqs = self.make_requests(token_ids_list, lora_name)
        return self._filled_sync(reqs, self._cached(reqs)) if reqs else self._no_rows()

    async def prefix_next_token_logprobs(
        self,
        token_ids: Sequence[int],
        lora_name: str | None = None,
        *,
        start: int = 0,
        cache: bool = True,
    ) -> torch.Tensor:
        """[`AsyncLMBase.prefix_next_token_logprobs`][], batched, cached unless ``cache=False``.

        Cached rows are not recomputed; the rest come from [`compute_prefix_batch`][]
        in one forward if overridden, else from [`compute_batch`][], one request a prefix.
        """
        req, rows, missing = self._prefix_lookup(token_ids, lora_name, start)
        if not missing:
            return torch.stack(rows)  # type: ignore[arg-type]
        if self.computes_prefixes_in_one_forward:
            rest = req.without_first(missing[0])  # cached leading rows: not asked again
            with self._computation.uncached([] if cache else [rest]):
                computed = await self._batcher().submit(rest)
            return _after(rows[: missing[0]], computed)
        return await self._filled(req.prefixes(), rows, cache)

    def prefix_next_token_logprobs_sync(
        self, token_ids: Sequence[int], lora_name: str | None = None, *, start: int = 0
    ) -> torch.Tensor:
        """Synchronous [`prefix_next_token_logprobs`][], computed in the calling thread."""
        req, rows, missing = self._prefix_lookup(token_ids, lora_name, start)
        if not missing:
            return torch.stack(rows)  # type: ignore[arg-type]
        if self.computes_prefixes_in_one_forward:
            (computed,) = raise_failures(self._computation.run([req.without_first(missing[0])]))
            return _after(rows[: missing[0]], computed)
        return self._filled_sync(req.prefixes(), rows)

    def _cached(self, reqs: Sequence[Request]) -> list[torch.Tensor | None]:
        """Each request's row in the output cache, or None."""
        cache = self.cache
        return [cache.get(r) for r in reqs] if cache is not None else [None] * len(reqs)

    async def _filled(self, reqs: list[Request], rows: list, cache: bool = True) -> torch.Tensor:
        """``rows`` (cached or None, one per request) stacked, the Nones from the batcher.

        The computed rows come uncopied (the cache's, or shared with concurrent stacking
        callers): the stack right after is the one copy that makes them the caller's.
        """
        misses = [i for i, row in enumerate(rows) if row is None]
        if misses:
            todo = [reqs[i] for i in misses]
            with self._computation.uncached([] if cache else todo):
                computed = await self._batcher(STACKING).submit_many(todo)
            for i, row in zip(misses, computed, strict=True):
                rows[i] = row
        return self._stacks.stack(rows)

    def _filled_sync(self, reqs: list[Request], rows: list[torch.Tensor | None]) -> torch.Tensor:
        """`_filled` in this thread: the distinct misses ``batch_size`` at a time."""
        todo = list(dict.fromkeys(r for r, row in zip(reqs, rows, strict=True) if row is None))
        computed: dict[Request, torch.Tensor] = {}
        for start in range(0, len(todo), self.batch_size):
            chunk = todo[start : start + self.batch_size]
            computed.update(zip(chunk, raise_failures(self._computation.run(chunk)), strict=True))
        pairs = zip(reqs, rows, strict=True)
        return self._stacks.stack([computed[r] if row is None else row for r, row in pairs])

    def _prefix_lookup(
        self, token_ids: Sequence[int], lora_name: str | None, start: int
    ) -> tuple[PrefixRequest, list[torch.Tensor | None], list[int]]:
        """The checked request, its prefixes' cached rows, and the missing indices.

        Looked up by keys that copy no ids (a long context's prefixes: rows x context).
        """
        req = self.make_prefix_request(token_ids, lora_name, start)
        rows = self._cached(req.lookup_keys())
        return req, rows, [i for i, row in enumerate(rows) if row is None]

    def clear_cache(self) -> None:
        """Drop every cached output (their memory stays in [`row_pool`][] for reuse)."""
        if self.cache is not None:
            self.cache.clear()

    def batch_info(self) -> dict[str, float]:
        """How calls were batched since the model was made (or [`reset_batch_info`][]).

        Returns:
            ``batches`` (calls of [`compute_batch`][]), ``requests`` (distinct
            requests they computed; cache hits and duplicates are not computed) and
            ``mean_batch_size``.
        """
        batches, requests = self._computation.counts()
        return {
            "batches": batches,
            "requests": requests,
            "mean_batch_size": requests / batches if batches else 0.0,
        }

    def reset_batch_info(self) -> None:
        """Start [`batch_info`][]'s counts again from zero."""
        self._computation.counts(reset=True)

    def output_cache_info(self) -> dict[str, int]:
        """Entries and bytes of the output cache (zeros when off), and free row bytes kept."""
        cache = self.cache
        entries, nbytes = (len(cache), cache.nbytes) if cache is not None else (0, 0)
        return {
            "entries": entries,
            "bytes": nbytes,
            "free_row_bytes": self.row_pool.stats().free_bytes,
        }

    def _free_row_bytes(self) -> int:
        """Free-row bytes [`row_pool`][] may keep: the cache budget's unused part.

        At least one batch: a steady cache evicts a batch of rows per batch it adds.
        """
        row_bytes = self.row_pool.row_bytes
        one_batch = self.batch_size * row_bytes
        cache = self.cache
        if cache is None:
            return one_batch
        if cache.max_bytes is not None:
            budget = cache.max_bytes
        elif cache.max_entries is not None:
            budget = cache.max_entries * row_bytes
        else:  # an unbounded cache: no budget to fill with free rows
            return one_batch
        return max(one_batch, budget - cache.nbytes)

    def _forget_adapter_outputs(self, lora_name: str) -> None:
        """Drop the cached outputs of a replaced or removed adapter (only to free memory)."""
        if self.cache is not None:
            self.cache.remove_if(lambda key: key.lora_name == lora_name)

    async def aclose(self) -> None:
        """Drain (compute every call already made on this event loop), then close.

        What ``async with lm:`` does on exit. New calls are refused from the start.
        Idempotent.
        """
        try:
            if self.state is ModelState.OPEN:
                self._state = ModelState.DRAINING
                await self._loop_batchers.aclose(drain=True)
        finally:
            await asyncio.to_thread(self.close)

    def _release(self) -> None:
        self._loop_batchers.close()  # queued calls fail; the worker ends after its batches
        super()._release()  # waits for a computation in flight, unloads adapters
        self.row_pool.close()
        self._stacks.close()
        if (close := self._backend_hook("close")) is not None:
            close()


def _after(known: list[Any], computed: torch.Tensor) -> torch.Tensor:
    """The rows ``known`` (leading) followed by ``computed`` (the caller's own already)."""
    return torch.cat([torch.stack(known), computed]) if known else computed


def _max_wait(max_wait: Any, timeout: Any) -> float:
    """``max_wait`` or its genlm-backend alias ``timeout``, checked."""
    if max_wait is not None and timeout is not None:
        raise ValueError(
            f"got timeout={timeout!r} and max_wait={max_wait!r}; they are the same setting "
            f"(timeout is genlm-backend's name for it): give one"
        )
    name, value = ("timeout", timeout) if timeout is not None else ("max_wait", max_wait)
    if value is None:
        return 0.0
    if not is_seconds(value):
        raise ValueError(
            f"{name} must be a finite number of seconds >= 0 (max_wait), got {value!r}"
        )
    return float(value)

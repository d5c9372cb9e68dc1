"""The AsyncLM contract: what every backend offers and what clients may call.

Two layers, following "Protocol for consumers, ABC for implementers":

* :class:`AsyncLM` is a runtime-checkable Protocol: the surface downstream code
  (genlm-control, genlm-bytes style clients) relies on.
* :class:`AsyncLMBase` is the ABC a backend subclasses. It decodes the vocabulary,
  validates token ids and LoRA names, and supplies ``batch_*``, ``sample``,
  ``batch_sample``, context managers and idempotent ``cleanup``.
* :class:`BatchedAsyncLM` adds the shared AutoBatcher and OutputCache: a backend
  implements one method, :meth:`BatchedAsyncLM.compute_batch`, and gets coalesced,
  deduplicated, cached async calls and matching sync calls for free.

Log-probabilities are float32 torch tensors on the CPU, normalised over the full
logits width (``len(byte_vocab)``), as in genlm-backend.
"""

from __future__ import annotations

import asyncio
import dataclasses
import numbers
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

import torch

from genlm_core.batching import AutoBatcher, WorkerThread
from genlm_core.cache import OutputCache
from genlm_core.errors import (
    BackendContractError,
    BatchSizeMismatchError,
    InvalidArgumentError,
    InvalidTokenIdsError,
    ModelClosedError,
    UnknownLoraError,
)
from genlm_core.heap import HeapTrimmer
from genlm_core.row_pool import RowPool
from genlm_core.tokenization import Token, decode_vocab
from genlm_core.validation import is_int_at_least

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "AsyncLM",
    "AsyncLMBase",
    "BatchedAsyncLM",
    "PrefixRequest",
    "Request",
    "sampling_args",
]

#: Default byte budget of :class:`BatchedAsyncLM`'s output cache (256 MiB). An entry
#: bound alone would let memory grow with the vocabulary: 4096 rows are 0.8 GiB for
#: GPT-2's 50k tokens, 2 GiB for Llama-3's 128k.
DEFAULT_CACHE_BYTES = 256 << 20


@runtime_checkable
class AsyncLM(Protocol):
    """What clients may rely on from any genlm language model."""

    tokenizer: Any
    byte_vocab: list[Token]
    str_vocab: list[str]

    async def next_token_logprobs(
        self, token_ids: Sequence[int], lora_name: str | None = None
    ) -> torch.Tensor:
        """Log-probabilities of the next token after ``token_ids``."""
        ...

    def next_token_logprobs_sync(
        self, token_ids: Sequence[int], lora_name: str | None = None
    ) -> torch.Tensor:
        """Synchronous :meth:`next_token_logprobs`."""
        ...

    async def batch_next_token_logprobs(
        self, token_ids_list: Sequence[Sequence[int]], lora_name: str | None = None
    ) -> torch.Tensor:
        """Stacked log-probabilities for several prompts."""
        ...


class Request(NamedTuple):
    """One next-token query: the prompt and the LoRA adapter (None = base model)."""

    token_ids: tuple[int, ...]
    lora_name: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class PrefixRequest:
    """A query for the next-token log-probs after every prefix of ``token_ids``.

    Only prefixes ending at position ``start`` or later are asked for: row ``j``
    answers ``token_ids[: start + j + 1]``. A dataclass, not a tuple, so it never
    equals (and is never deduplicated with) the :class:`Request` of the same tokens.
    """

    token_ids: tuple[int, ...]
    lora_name: str | None
    start: int = 0

    def prefixes(self) -> list[Request]:
        """The next-token requests it answers, in order."""
        ids, lora = self.token_ids, self.lora_name
        return [Request(ids[: i + 1], lora) for i in range(self.start, len(ids))]


class AsyncLMBase(ABC):
    """Base class for backends: vocabulary, validation, sampling and lifecycle.

    Subclasses implement :meth:`next_token_logprobs` and
    :meth:`next_token_logprobs_sync` (or subclass :class:`BatchedAsyncLM`), and
    a ``from_name`` classmethod.

    Args:
        tokenizer: A Hugging Face tokenizer (or anything :func:`decode_vocab` accepts).
        vocab_size: Width of the model's logits when wider than the tokenizer;
            extra ids get empty byte strings.
        byte_vocab: Precomputed ``(byte_vocab, str_vocab)`` to skip decoding.

    Attributes:
        max_positions: The model's context length, or None (the default) if unknown;
            :meth:`validate_token_ids` rejects longer prompts. Backends set it.
    """

    max_positions: int | None = None

    def __init__(
        self,
        tokenizer: Any,
        *,
        vocab_size: int | None = None,
        byte_vocab: tuple[list[Token], list[str]] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        if byte_vocab is None:
            byte_vocab = decode_vocab(tokenizer, vocab_size=vocab_size)
        self.byte_vocab, self.str_vocab = byte_vocab
        self._loras: dict[str, Any] = {}
        self._closed = False

    # -- contract ---------------------------------------------------------------

    @classmethod
    def from_name(cls, model_name: str, **opts: Any) -> AsyncLMBase:
        """Load a model by hub name or local directory. Backends override this."""
        raise NotImplementedError(f"{cls.__name__} does not implement from_name()")

    @abstractmethod
    async def next_token_logprobs(
        self, token_ids: Sequence[int], lora_name: str | None = None
    ) -> torch.Tensor:
        """Log-probabilities of the next token after ``token_ids``.

        Args:
            token_ids: The prompt as token ids (non-empty).
            lora_name: A LoRA adapter added with :meth:`add_new_lora`; None is the base model.

        Returns:
            A float32 CPU tensor of shape ``(len(byte_vocab),)`` with ``logsumexp == 0``.
        """

    @abstractmethod
    def next_token_logprobs_sync(
        self, token_ids: Sequence[int], lora_name: str | None = None
    ) -> torch.Tensor:
        """Synchronous :meth:`next_token_logprobs`."""

    async def batch_next_token_logprobs(
        self, token_ids_list: Sequence[Sequence[int]], lora_name: str | None = None
    ) -> torch.Tensor:
        """Log-probabilities for several prompts, stacked into ``(len(list), vocab)``."""
        reqs = self.make_requests(token_ids_list, lora_name)
        outs = await asyncio.gather(
            *(self.next_token_logprobs(r.token_ids, lora_name=lora_name) for r in reqs)
        )
        return _stack(outs, len(self.byte_vocab))

    def batch_next_token_logprobs_sync(
        self, token_ids_list: Sequence[Sequence[int]], lora_name: str | None = None
    ) -> torch.Tensor:
        """Synchronous :meth:`batch_next_token_logprobs`."""
        reqs = self.make_requests(token_ids_list, lora_name)
        outs = [self.next_token_logprobs_sync(r.token_ids, lora_name=lora_name) for r in reqs]
        return _stack(outs, len(self.byte_vocab))

    async def prefix_next_token_logprobs(
        self, token_ids: Sequence[int], lora_name: str | None = None, *, start: int = 0
    ) -> torch.Tensor:
        """Next-token log-probabilities after every prefix of ``token_ids``.

        Row ``j`` equals ``next_token_logprobs(token_ids[: start + j + 1])``: what
        scoring a known text, or a byte-level beam prefilling it, needs at every token
        boundary. This default batches the per-prefix calls; a backend that can
        compute every position in one forward (genlm-hf) overrides it.

        Args:
            token_ids: The sequence (non-empty).
            lora_name: A LoRA adapter added with :meth:`add_new_lora`; None is the base model.
            start: First position whose row is wanted (``0 <= start < len(token_ids)``);
                a context already computed need not be again.

        Returns:
            A float32 CPU tensor of shape ``(len(token_ids) - start, len(byte_vocab))``.

        Raises:
            InvalidTokenIdsError: Bad ``token_ids`` (see :meth:`validate_token_ids`).
            InvalidArgumentError: ``start`` out of range.
        """
        req = self.make_prefix_request(token_ids, lora_name, start)
        return await self.batch_next_token_logprobs(
            [p.token_ids for p in req.prefixes()], lora_name=req.lora_name
        )

    def prefix_next_token_logprobs_sync(
        self, token_ids: Sequence[int], lora_name: str | None = None, *, start: int = 0
    ) -> torch.Tensor:
        """Synchronous :meth:`prefix_next_token_logprobs`."""
        req = self.make_prefix_request(token_ids, lora_name, start)
        return self.batch_next_token_logprobs_sync(
            [p.token_ids for p in req.prefixes()], lora_name=req.lora_name
        )

    def make_prefix_request(
        self, token_ids: Any, lora_name: str | None = None, start: int = 0
    ) -> PrefixRequest:
        """Validate a prefix call's arguments into a :class:`PrefixRequest`."""
        req = self.make_request(token_ids, lora_name)
        n = len(req.token_ids)
        if not is_int_at_least(start, 0) or start >= n:
            raise InvalidArgumentError(
                f"start must be an integer in 0..{n - 1} (a position of the {n} token ids), "
                f"got {start!r}"
            )
        return PrefixRequest(req.token_ids, req.lora_name, int(start))

    # -- validation -------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """Width of the log-probability vectors (token ids are ``0 .. vocab_size-1``)."""
        return len(self.byte_vocab)

    def validate_token_ids(self, token_ids: Any) -> tuple[int, ...]:
        """Check a prompt and return it as a tuple of Python ints.

        Raises:
            InvalidTokenIdsError: Empty, not a sequence of integers, out of range, or
                longer than :attr:`max_positions`.
        """
        if isinstance(token_ids, torch.Tensor):
            token_ids = token_ids.tolist()
        if isinstance(token_ids, (str, bytes)) or not isinstance(token_ids, Iterable):
            raise InvalidTokenIdsError(
                f"token_ids must be a sequence of ints, got {type(token_ids).__name__} "
                f"{token_ids!r:.80}; encode text first with lm.tokenizer.encode(...)"
            )
        ids = tuple(token_ids)
        if not ids:
            raise InvalidTokenIdsError(
                "token_ids is empty; a prompt needs at least one token "
                "(e.g. the tokenizer's BOS token id)"
            )
        n = len(self.byte_vocab)
        limit = self.max_positions
        if limit is not None and len(ids) > limit:
            raise InvalidTokenIdsError(
                f"token_ids has {len(ids)} tokens, more than the model's context of "
                f"{limit} positions; shorten the prompt to at most {limit} tokens"
            )
        # Fast path, on every call of a sampler: plain ints, all in range.
        if all(type(t) is int for t in ids) and 0 <= min(ids) and max(ids) < n:
            return ids
        for pos, t in enumerate(ids):
            if isinstance(t, bool) or not isinstance(t, numbers.Integral):
                raise InvalidTokenIdsError(
                    f"token_ids[{pos}] = {t!r} is a {type(t).__name__}, not an int"
                )
            if not 0 <= t < n:
                raise InvalidTokenIdsError(
                    f"token_ids[{pos}] = {t} is out of range for a vocabulary of {n} "
                    f"tokens (valid ids: 0..{n - 1})"
                )
        if any(type(t) is not int for t in ids):
            ids = tuple(int(t) for t in ids)
        return ids

    def validate_lora(self, lora_name: str | None) -> str | None:
        """Check that ``lora_name`` is None or an added adapter.

        Raises:
            UnknownLoraError: The adapter was never added (or was removed).
        """
        if lora_name is not None and lora_name not in self._loras:
            known = ", ".join(map(repr, sorted(self._loras))) or "none"
            raise UnknownLoraError(
                f"unknown LoRA adapter {lora_name!r} (loaded: {known}); add it first with "
                f"lm.add_new_lora(path, {lora_name!r}), or pass lora_name=None for the base model"
            )
        return lora_name

    def make_request(self, token_ids: Any, lora_name: str | None = None) -> Request:
        """Validate a call's arguments into a hashable :class:`Request`."""
        self._check_open()
        return Request(self.validate_token_ids(token_ids), self.validate_lora(lora_name))

    def make_requests(
        self,
        token_ids_list: Sequence[Any],
        lora_name: str | None = None,
        *,
        argument: str = "token_ids_list",
    ) -> list[Request]:
        """:meth:`make_request` for each prompt of a batch call.

        Args:
            token_ids_list: The prompts.
            lora_name: The adapter of every prompt.
            argument: The caller's name for ``token_ids_list``, used in errors.

        Raises:
            InvalidTokenIdsError: Naming which prompt of the batch is bad
                (``token_ids_list[i]``) and why.
        """
        self._check_open()
        if isinstance(token_ids_list, (str, bytes)) or not isinstance(token_ids_list, Iterable):
            raise InvalidTokenIdsError(
                f"{argument} must be a list of prompts (lists of token ids), got "
                f"{type(token_ids_list).__name__} {token_ids_list!r:.80}"
            )
        lora = self.validate_lora(lora_name)
        requests = []
        for i, token_ids in enumerate(token_ids_list):
            try:
                requests.append(Request(self.validate_token_ids(token_ids), lora))
            except InvalidTokenIdsError as exc:
                raise InvalidTokenIdsError(f"{argument}[{i}]: {exc}") from None
        return requests

    # -- LoRA -------------------------------------------------------------------

    def add_new_lora(self, lora_path: str, lora_name: str) -> None:
        """Load a LoRA adapter under ``lora_name``; select it per call with ``lora_name=``.

        Loading under an existing name replaces that adapter (and drops its cached outputs).
        """
        raise NotImplementedError(f"{type(self).__name__} does not support LoRA adapters")

    def remove_lora(self, lora_name: str) -> None:
        """Unload an adapter added with :meth:`add_new_lora`."""
        self.validate_lora(lora_name)
        del self._loras[lora_name]
        self.clear_cache()

    @property
    def lora_names(self) -> list[str]:
        """Names of the loaded LoRA adapters."""
        return sorted(self._loras)

    # -- sampling ---------------------------------------------------------------

    async def sample(
        self,
        prompt_token_ids: Sequence[int],
        max_tokens: int,
        eos_token_ids: Iterable[int],
        temperature: float = 1.0,
        seed: int | None = None,
        lora_name: str | None = None,
    ) -> list[int]:
        """Sample a continuation token by token, stopping at an EOS id or ``max_tokens``.

        Args:
            prompt_token_ids: The prompt.
            max_tokens: Most tokens to generate (>= 0).
            eos_token_ids: Ids that end the sample (not included in the result).
            temperature: Logits are divided by it (> 0).
            seed: Makes the sample reproducible.
            lora_name: LoRA adapter, None for the base model.

        Returns:
            The generated token ids.
        """
        prompt = list(self.make_request(prompt_token_ids, lora_name).token_ids)
        eos, generator = sampling_args(max_tokens, eos_token_ids, temperature, seed)
        out: list[int] = []
        for _ in range(max_tokens):
            logprobs = await self.next_token_logprobs(prompt + out, lora_name=lora_name)
            token = _draw(logprobs, temperature, generator)
            if token in eos:
                break
            out.append(token)
        return out

    async def batch_sample(
        self,
        prompt_token_ids_list: Sequence[Sequence[int]],
        max_tokens: int,
        eos_token_ids: Iterable[int],
        temperature: float = 1.0,
        seed: int | None = None,
        lora_name: str | None = None,
    ) -> list[list[int]]:
        """Sample one continuation per prompt, concurrently (so calls are batched).

        With a ``seed``, prompt ``i`` uses ``seed + i``: reproducible, yet two equal
        prompts get independent samples.
        """
        eos = list(eos_token_ids)
        return list(
            await asyncio.gather(
                *(
                    self.sample(
                        ids,
                        max_tokens,
                        eos,
                        temperature,
                        None if seed is None else seed + i,
                        lora_name,
                    )
                    for i, ids in enumerate(prompt_token_ids_list)
                )
            )
        )

    # -- lifecycle --------------------------------------------------------------

    def clear_cache(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Drop cached outputs. The base class caches nothing."""

    def _check_open(self) -> None:
        if self._closed:
            raise ModelClosedError(
                f"{type(self).__name__} was cleaned up (cleanup() or the end of a `with` "
                f"block); load the model again to keep using it"
            )

    @property
    def closed(self) -> bool:
        """True after :meth:`cleanup`."""
        return self._closed

    def cleanup(self) -> None:
        """Release the model's resources. Idempotent; later calls raise ModelClosedError."""
        if self._closed:
            return
        self._closed = True
        self._release()

    def _release(self) -> None:
        """Free backend resources (engine, caches). Called once by :meth:`cleanup`."""
        self.clear_cache()

    def __enter__(self) -> AsyncLMBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    async def __aenter__(self) -> AsyncLMBase:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cleanup()


class BatchedAsyncLM(AsyncLMBase):
    """An AsyncLMBase whose calls go through the shared AutoBatcher and OutputCache.

    Implement :meth:`compute_batch`; it runs off the event loop, receives unique
    validated requests, and returns one log-probability tensor per request.

    Args:
        tokenizer: See :class:`AsyncLMBase`.
        batch_size: Most requests per forward pass.
        max_wait: Seconds a batch may wait for more callers, counted from its first
            request. 0 dispatches as soon as the event loop has no more runnable callers.
        cache_size: Most cached outputs (0 disables the cache).
        cache_bytes: Byte budget of the cached outputs (default
            :data:`DEFAULT_CACHE_BYTES`); None bounds them by ``cache_size`` alone.
        timeout: genlm-backend's name for ``max_wait`` (accepted for migration).
        **kwargs: Passed to :class:`AsyncLMBase`.
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        batch_size: int = 64,
        max_wait: float = 0.0,
        cache_size: int = 4096,
        cache_bytes: int | None = DEFAULT_CACHE_BYTES,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(tokenizer, **kwargs)
        if timeout is not None:  # genlm-backend's name for max_wait
            max_wait = timeout
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        self.batch_size = batch_size
        self.max_wait = max_wait
        self.cache: OutputCache | None = (
            OutputCache(max_entries=cache_size, max_bytes=cache_bytes) if cache_size else None
        )
        self._batchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AutoBatcher] = (
            weakref.WeakKeyDictionary()
        )
        # One worker thread for the batchers of every event loop (one per asyncio.run):
        # what init_worker_thread and the libraries set up in it is kept between runs.
        self._worker_thread: WorkerThread | None = None
        #: Recycled memory for the rows :meth:`compute_batch` returns: a backend that
        #: builds its rows with ``self.row_pool.copy_rows(batch)`` writes into warm
        #: pages instead of fresh ones (see :mod:`genlm_core.row_pool`).
        self.row_pool = RowPool(len(self.byte_vocab), max_free_bytes=self._free_row_bytes)
        self._batch_counts = [0, 0]  # compute_batch calls, requests they computed
        self._batch_counts_lock = threading.Lock()  # the worker and sync callers count
        #: Returns memory freed by batches (evicted rows, a backend's buffers) to the OS,
        #: so that resident memory follows the cache budget (see :mod:`genlm_core.heap`).
        self.heap_trimmer = HeapTrimmer(interval=0.5)

    @abstractmethod
    def compute_batch(self, requests: list[Request]) -> Sequence[torch.Tensor]:
        """Compute log-probabilities for unique, validated requests (runs in a worker thread).

        Args:
            requests: Distinct ``Request(token_ids, lora_name)`` tuples.

        Returns:
            One float32 tensor of shape ``(len(byte_vocab),)`` per request, in order.
        """

    def init_worker_thread(self) -> None:
        """Called once in the model's worker thread before its first batch.

        Override to set thread-local state for :meth:`compute_batch` (genlm-hf sets
        the thread's torch threads here). It runs only in that thread, which the model
        keeps for every event loop it is used from, never in a caller's thread.
        Default: nothing.
        """

    def compute_prefix_batch(
        self, requests: list[PrefixRequest]
    ) -> Sequence[Sequence[torch.Tensor]]:
        """Optional: log-probs after every prefix of each request, one forward each.

        Override it when the model can compute all positions of a sequence at once
        (a causal LM's forward does); :meth:`prefix_next_token_logprobs` then sends
        each sequence here whole instead of one :meth:`compute_batch` request per
        prefix. Runs in the worker thread, like :meth:`compute_batch`; every row
        returned is also stored in the output cache under its prefix's
        :class:`Request`, so later next-token calls along the sequence are hits.

        Args:
            requests: Distinct ``PrefixRequest(token_ids, lora_name)``.

        Returns:
            Per request, one float32 tensor of shape ``(len(byte_vocab),)`` per prefix
            ending at position ``start`` or later (or one tensor of shape
            ``(len(token_ids) - start, vocab)``).
        """
        raise NotImplementedError  # pragma: no cover - only called when overridden

    @property
    def computes_prefixes_in_one_forward(self) -> bool:
        """Whether this backend overrides :meth:`compute_prefix_batch`."""
        return type(self).compute_prefix_batch is not BatchedAsyncLM.compute_prefix_batch

    def _batch_fn(self, keys: list[Any]) -> list[torch.Tensor]:
        """The batcher's function: next-token requests and prefix requests, cached."""
        requests = [k for k in keys if type(k) is not PrefixRequest]
        if len(requests) == len(keys):
            return self._next_token_rows(keys)
        prefix_requests = [k for k in keys if type(k) is PrefixRequest]
        rows_of_requests = self._next_token_rows(requests) if requests else []
        if len(rows_of_requests) != len(requests):
            raise BatchSizeMismatchError(
                f"{type(self).__name__}.compute_batch returned {len(rows_of_requests)} "
                f"results for {len(requests)} requests"
            )
        results: dict[Any, torch.Tensor] = dict(zip(requests, rows_of_requests, strict=True))
        outs = list(self.compute_prefix_batch(prefix_requests))
        if len(outs) != len(prefix_requests):
            raise BatchSizeMismatchError(
                f"{type(self).__name__}.compute_prefix_batch returned {len(outs)} results "
                f"for {len(prefix_requests)} requests"
            )
        for req, rows in zip(prefix_requests, outs, strict=True):
            rows = [self._owned(row) for row in rows]
            expected = len(req.token_ids) - req.start
            if len(rows) != expected:
                raise BackendContractError(
                    f"{type(self).__name__}.compute_prefix_batch returned {len(rows)} rows "
                    f"for a sequence of {len(req.token_ids)} tokens from position "
                    f"{req.start}; expected {expected}, one per prefix"
                )
            if self.cache is not None:
                for prefix, row in zip(req.prefixes(), rows, strict=True):
                    self.cache[prefix] = row
            results[req] = torch.stack(rows)
        return [results[k] for k in keys]

    def _next_token_rows(self, requests: list[Request]) -> list[torch.Tensor]:
        outs = list(self.compute_batch(requests))
        with self._batch_counts_lock:
            self._batch_counts[0] += 1
            self._batch_counts[1] += len(requests)
        if len(outs) == len(requests):
            outs = [self._owned(out) for out in outs]
            if self.cache is not None:
                for req, out in zip(requests, outs, strict=True):
                    self.cache[req] = out
        self.heap_trimmer.maybe_trim()
        return outs

    def _owned(self, out: Any) -> torch.Tensor:
        """``out`` checked, and copied if it is a view (it would pin its whole batch).

        Rows of the pool are whole: asking for their storage would keep one more Python
        object per cached row alive, for the garbage collector to scan.
        """
        self._check_output(out)
        if not self.row_pool.owns(out) and out.untyped_storage().nbytes() > out.nbytes:
            return out.clone()
        return out

    def _check_output(self, out: Any) -> None:
        if not isinstance(out, torch.Tensor) or out.shape != (len(self.byte_vocab),):
            shape = getattr(out, "shape", None)
            raise BackendContractError(
                f"{type(self).__name__}.compute_batch returned {type(out).__name__} of shape "
                f"{shape}; expected a torch.Tensor of shape ({len(self.byte_vocab)},)"
            )

    def _batcher(self) -> AutoBatcher:
        loop = asyncio.get_running_loop()
        batcher = self._batchers.get(loop)
        if batcher is None or batcher.closed:
            worker = self._worker_thread
            if worker is None or worker.closed:
                worker = self._worker_thread = WorkerThread(
                    f"{type(self).__name__}.worker", self.init_worker_thread
                )
            batcher = AutoBatcher(
                self._batch_fn,
                max_batch_size=self.batch_size,
                max_wait=self.max_wait,
                name=f"{type(self).__name__}.batcher",
                worker_thread=worker,
            )
            self._batchers[loop] = batcher
        return batcher

    async def next_token_logprobs(
        self, token_ids: Sequence[int], lora_name: str | None = None
    ) -> torch.Tensor:
        """Log-probabilities of the next token, batched with concurrent callers."""
        req = self.make_request(token_ids, lora_name)
        if self.cache is not None:
            hit = self.cache.get(req)
            if hit is not None:
                return hit
        return await self._batcher().submit(req)

    def next_token_logprobs_sync(
        self, token_ids: Sequence[int], lora_name: str | None = None
    ) -> torch.Tensor:
        """Log-probabilities of the next token, computed in the calling thread."""
        return self.batch_next_token_logprobs_sync([token_ids], lora_name)[0]

    async def batch_next_token_logprobs(
        self, token_ids_list: Sequence[Sequence[int]], lora_name: str | None = None
    ) -> torch.Tensor:
        """Log-probabilities for several prompts, submitted to the batcher together."""
        reqs = self.make_requests(token_ids_list, lora_name)
        if not reqs:
            return torch.empty((0, len(self.byte_vocab)), dtype=torch.float32)
        outs: list[torch.Tensor | None] = [
            self.cache.get(r) if self.cache is not None else None for r in reqs
        ]
        misses = [i for i, out in enumerate(outs) if out is None]
        if misses:
            computed = await self._batcher().submit_many([reqs[i] for i in misses])
            for i, out in zip(misses, computed, strict=True):
                outs[i] = out
        return torch.stack(outs)  # type: ignore[arg-type]

    def batch_next_token_logprobs_sync(
        self, token_ids_list: Sequence[Sequence[int]], lora_name: str | None = None
    ) -> torch.Tensor:
        """Synchronous batch, deduplicated and cached like the async path."""
        reqs = self.make_requests(token_ids_list, lora_name)
        if not reqs:
            return torch.empty((0, len(self.byte_vocab)), dtype=torch.float32)
        results: dict[Request, torch.Tensor] = {}
        missing: list[Request] = []
        for req in reqs:
            if req in results:
                continue
            hit = self.cache.get(req) if self.cache is not None else None
            if hit is not None:
                results[req] = hit
            else:
                results[req] = None  # type: ignore[assignment]
                missing.append(req)
        for start in range(0, len(missing), self.batch_size):
            chunk = missing[start : start + self.batch_size]
            outs = self._batch_fn(chunk)
            if len(outs) != len(chunk):
                raise BatchSizeMismatchError(
                    f"{type(self).__name__}.compute_batch returned {len(outs)} results "
                    f"for {len(chunk)} requests"
                )
            results.update(zip(chunk, outs, strict=True))
        return torch.stack([results[r] for r in reqs])

    async def prefix_next_token_logprobs(
        self, token_ids: Sequence[int], lora_name: str | None = None, *, start: int = 0
    ) -> torch.Tensor:
        """Next-token log-probabilities after every prefix, batched and cached.

        Row ``j`` equals ``next_token_logprobs(token_ids[: start + j + 1])``. Rows
        already in the output cache are not recomputed. With
        :meth:`compute_prefix_batch` overridden the sequence is computed in one
        forward; otherwise each missing prefix is one request of
        :meth:`compute_batch`, in as few batches as fit.

        Returns:
            A float32 CPU tensor of shape ``(len(token_ids) - start, len(byte_vocab))``.
        """
        req = self.make_prefix_request(token_ids, lora_name, start)
        rows = self._cached_prefix_rows(req)
        missing = [i for i, row in enumerate(rows) if row is None]
        if not missing:
            return torch.stack(rows)  # type: ignore[arg-type]
        if self.computes_prefixes_in_one_forward:
            return await self._batcher().submit(req)
        prefixes = req.prefixes()
        computed = await self._batcher().submit_many([prefixes[i] for i in missing])
        for i, row in zip(missing, computed, strict=True):
            rows[i] = row
        return torch.stack(rows)  # type: ignore[arg-type]

    def prefix_next_token_logprobs_sync(
        self, token_ids: Sequence[int], lora_name: str | None = None, *, start: int = 0
    ) -> torch.Tensor:
        """Synchronous :meth:`prefix_next_token_logprobs`, computed in the calling thread."""
        req = self.make_prefix_request(token_ids, lora_name, start)
        rows = self._cached_prefix_rows(req)
        if all(row is not None for row in rows):
            return torch.stack(rows)  # type: ignore[arg-type]
        if self.computes_prefixes_in_one_forward:
            return self._batch_fn([req])[0]
        return self.batch_next_token_logprobs_sync(
            [p.token_ids for p in req.prefixes()], lora_name=req.lora_name
        )

    def _cached_prefix_rows(self, req: PrefixRequest) -> list[torch.Tensor | None]:
        prefixes = req.prefixes()
        if self.cache is None:
            return [None] * len(prefixes)
        return [self.cache.get(prefix) for prefix in prefixes]

    def clear_cache(self) -> None:
        """Drop every cached output.

        The memory of dropped rows stays in :attr:`row_pool` for the next batches
        (within the output cache's byte budget, see :meth:`_free_row_bytes`);
        :meth:`cleanup` frees it.
        """
        if self.cache is not None:
            self.cache.clear()

    def batch_info(self) -> dict[str, float]:
        """How calls were batched since the model was made (or :meth:`reset_batch_info`).

        Returns:
            ``batches`` (calls of :meth:`compute_batch`), ``requests`` (distinct
            requests they computed; cache hits and duplicates are not computed) and
            ``mean_batch_size``.
        """
        with self._batch_counts_lock:
            batches, requests = self._batch_counts
        return {
            "batches": batches,
            "requests": requests,
            "mean_batch_size": requests / batches if batches else 0.0,
        }

    def reset_batch_info(self) -> None:
        """Start :meth:`batch_info`'s counts again from zero."""
        with self._batch_counts_lock:
            self._batch_counts[:] = [0, 0]

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
        """How many bytes of free rows :attr:`row_pool` may keep.

        What the output cache's budget leaves unused (cached plus free rows stay
        within ``cache_bytes``), and at least one full batch, so that a program in a
        steady state, whose cache evicts a batch of rows per batch it adds, reuses
        them.
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

    def _drop_adapter_outputs(self, lora_name: str) -> None:
        """Drop the cached outputs of adapter ``lora_name`` (it was replaced or removed)."""
        if self.cache is not None:
            self.cache.remove_if(lambda key: getattr(key, "lora_name", None) == lora_name)

    def _release(self) -> None:
        for batcher in list(self._batchers.values()):
            batcher.close()
        self._batchers.clear()
        if self._worker_thread is not None:
            self._worker_thread.shutdown()  # after the batches already handed to it
        self.row_pool.close()
        super()._release()


# -- helpers -------------------------------------------------------------------


def _stack(outs: Sequence[torch.Tensor], width: int) -> torch.Tensor:
    if not outs:
        return torch.empty((0, width), dtype=torch.float32)
    return torch.stack(list(outs))


def sampling_args(
    max_tokens: int, eos_token_ids: Iterable[int], temperature: float, seed: int | None
) -> tuple[frozenset[int], torch.Generator | None]:
    """Validate ``sample``'s arguments; return the EOS ids and a seeded generator (or None).

    Public so that a backend with its own sampler refuses bad input exactly like
    :meth:`AsyncLMBase.sample` does.

    Raises:
        ValueError: Naming the bad value and the fix.
    """
    if not is_int_at_least(max_tokens, 0):
        raise ValueError(f"max_tokens must be an integer >= 0, got {max_tokens!r}")
    if not isinstance(temperature, numbers.Real) or not temperature > 0:
        raise ValueError(
            f"temperature must be a number > 0, got {temperature!r}; for greedy decoding "
            f"take argmax of next_token_logprobs instead"
        )
    if isinstance(eos_token_ids, int):
        raise ValueError(
            f"eos_token_ids must be a list of ints, got the int {eos_token_ids}; "
            f"wrap it: [{eos_token_ids}]"
        )
    eos = frozenset(int(t) for t in eos_token_ids)
    generator = None
    if seed is not None:
        generator = torch.Generator()
        generator.manual_seed(int(seed))
    return eos, generator


def _draw(logprobs: torch.Tensor, temperature: float, generator: torch.Generator | None) -> int:
    logits = logprobs.float() if temperature == 1.0 else logprobs.float() / temperature
    probs = torch.softmax(logits, dim=-1)
    return int(torch.multinomial(probs, num_samples=1, generator=generator).item())

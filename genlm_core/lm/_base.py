"""AsyncLMBase: the base class of every backend.

It decodes the vocabulary, validates token ids and adapters, supplies the batch and
prefix calls, sampling (:class:`~genlm_core.lm._sampling.Sampling`), the LoRA
bookkeeping (:class:`~genlm_core.lm._adapters.LoraAdapters`) and the lifecycle.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from genlm_core._validation import is_int_at_least, is_integer
from genlm_core.errors import InvalidArgumentError, InvalidTokenIdsError, ModelClosedError
from genlm_core.lm._adapters import AdapterTable, LoraAdapters
from genlm_core.lm._requests import LONG_PROMPT, PrefixRequest, Request, token_ids_key
from genlm_core.lm._sampling import Sampling
from genlm_core.runtime import ComputeGate
from genlm_core.tokenization import Token, decode_vocab

__all__ = ["AsyncLMBase"]

log = logging.getLogger(__name__)


class AsyncLMBase(LoraAdapters, Sampling, ABC):
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
        thread_safe: Class attribute. False (the default): the core never runs two of
            this backend's computations at once, whichever threads call. A backend
            whose computation is safe to run concurrently sets it True.
        row_device: Where the log-prob rows it returns live: the CPU (the default),
            or the model's GPU for a backend that offers rows on the device
            (genlm-hf's ``row_device="model"``).
    """

    max_positions: int | None = None
    thread_safe: bool = False
    row_device: torch.device = torch.device("cpu")

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
        self._adapters = AdapterTable()
        self._gate = ComputeGate(concurrent=self.thread_safe)
        self._closed = False
        self._cleanup_lock = threading.RLock()  # a second cleanup returns once it is done

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
            A float32 tensor of shape ``(len(byte_vocab),)`` with ``logsumexp == 0``, on
            :attr:`row_device` (the CPU unless the backend was asked otherwise).
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
        return _stack(outs, len(self.byte_vocab), self.row_device)

    def batch_next_token_logprobs_sync(
        self, token_ids_list: Sequence[Sequence[int]], lora_name: str | None = None
    ) -> torch.Tensor:
        """Synchronous :meth:`batch_next_token_logprobs`."""
        reqs = self.make_requests(token_ids_list, lora_name)
        outs = [self.next_token_logprobs_sync(r.token_ids, lora_name=lora_name) for r in reqs]
        return _stack(outs, len(self.byte_vocab), self.row_device)

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
            A float32 tensor on :attr:`row_device` of shape
            ``(len(token_ids) - start, len(byte_vocab))``.

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
        return PrefixRequest(req.token_ids, req.lora_name, int(start), req.generation)

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
        if _plain_ids_in_range(ids, n):  # the fast path, on every call of a sampler
            return token_ids_key(ids)
        for pos, t in enumerate(ids):
            if not is_integer(t):
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
        return token_ids_key(ids)

    def make_request(self, token_ids: Any, lora_name: str | None = None) -> Request:
        """Validate a call's arguments into a hashable :class:`Request`."""
        self._check_open()
        ids = self.validate_token_ids(token_ids)
        return Request(ids, lora_name, self._generation(lora_name))

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
        generation = self._generation(lora_name)
        requests = []
        for i, token_ids in enumerate(token_ids_list):
            try:
                requests.append(Request(self.validate_token_ids(token_ids), lora_name, generation))
            except InvalidTokenIdsError as exc:
                raise InvalidTokenIdsError(f"{argument}[{i}]: {exc}") from None
        return requests

    @contextlib.contextmanager
    def exclusive_access(self) -> Iterator[None]:
        """Hold the model with no computation running (for changes to it).

        Waits for the computations in flight and holds new ones back until the block
        ends. Backends use it around changes made outside a computation (clearing a
        key/value cache, freeing the model); reentrant for the thread that holds it.
        """
        with self._gate.exclusive():
            yield

    # -- lifecycle --------------------------------------------------------------

    def clear_cache(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Drop cached outputs. The base class caches nothing."""

    def _check_open(self) -> None:
        if self._closed:
            raise self._closed_error()

    def _closed_error(self) -> ModelClosedError:
        """The error of every call made, queued or starting to compute after cleanup."""
        source = getattr(self.tokenizer, "name_or_path", None)
        name = type(self).__name__ + (
            f" ({source!r})" if isinstance(source, str) and source else ""
        )
        return ModelClosedError(
            f"{name} was cleaned up (cleanup(), aclose() or the end of a `with` block) "
            f"before this call was computed; load the model again to keep using it"
        )

    @property
    def closed(self) -> bool:
        """True after :meth:`cleanup`."""
        return self._closed

    def cleanup(self) -> None:
        """Release the model's resources. Idempotent; later calls raise ModelClosedError.

        Calls still queued fail with :class:`ModelClosedError`; a computation already
        running finishes first (this waits for it), and none starts once this returns,
        for any backend: the core refuses it where it would start. From a coroutine,
        ``await`` :meth:`cleanup_async` instead (this blocks the event loop meanwhile).
        """
        with self._cleanup_lock:
            if self._closed:
                return
            self._closed = True
            self._gate.close(self._closed_error)  # waits for the computations running
            self._release()

    async def cleanup_async(self) -> None:
        """:meth:`cleanup` for coroutines: the same, waited for off the event loop.

        Waiting for the computation in flight and freeing the model run in a thread,
        so the program's other coroutines keep running meanwhile.
        """
        await asyncio.to_thread(self.cleanup)

    async def aclose(self) -> None:
        """Wait for the calls in flight to get their answers, then :meth:`cleanup_async`.

        What ``async with lm:`` does on exit. Idempotent.
        """
        await self.cleanup_async()

    def _release(self) -> None:
        """Free backend resources (engine, caches). Called once by :meth:`cleanup`.

        Overrides call ``super()._release()``; this unloads the adapters (the model may
        be shared with other wrappers) and drops cached outputs. An adapter that fails
        to unload (its server already gone, say) is logged, not raised: cleanup goes on.
        """
        with self.exclusive_access():
            for adapter, handle in self._adapters.entries():
                self._adapters.pop(adapter.name)
                try:
                    self.unload_adapter(adapter, handle)
                except Exception as exc:  # noqa: BLE001 - reported; the rest must still go
                    log.warning(
                        "%s.cleanup: LoRA adapter %r could not be unloaded (%s: %s)",
                        type(self).__name__,
                        adapter.name,
                        type(exc).__name__,
                        exc,
                    )
        self.clear_cache()

    def __enter__(self) -> AsyncLMBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    async def __aenter__(self) -> AsyncLMBase:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


# -- helpers -------------------------------------------------------------------


def _stack(outs: Sequence[torch.Tensor], width: int, device: torch.device) -> torch.Tensor:
    if not outs:
        return torch.empty((0, width), dtype=torch.float32, device=device)
    return torch.stack(list(outs))


def _plain_ids_in_range(ids: tuple[Any, ...], n: int) -> bool:
    """Whether every id is a plain ``int`` in ``[0, n)``.

    Short prompts (a sampler's every call) take a generator and ``min``/``max``
    (~1 us); long ones C loops and NumPy, ~20 ns a token: a 250k-token context (a 1 MB
    text) in ~5 ms, half the generator's time.
    """
    if len(ids) < LONG_PROMPT:
        return all(type(t) is int for t in ids) and 0 <= min(ids) and max(ids) < n
    if list(map(type, ids)).count(int) != len(ids):
        return False
    try:
        array = np.fromiter(ids, dtype=np.int64, count=len(ids))
    except OverflowError:
        return False
    return bool(array.min() >= 0 and array.max() < n)

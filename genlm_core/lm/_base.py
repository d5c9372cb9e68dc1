"""AsyncLMBase: the base class of every backend."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch

from genlm_core.checks import is_int_at_least
from genlm_core.compat import model_methods as _compat
from genlm_core.errors import (
    InvalidArgumentError,
    InvalidTokenIdsError,
    LoraNotSupportedError,
    ModelClosedError,
)
from genlm_core.lm._adapters import LoraAdapter, LoraAdapters
from genlm_core.lm._requests import PrefixRequest, Request, checked_token_ids
from genlm_core.lm._sampling import draw, sampling_args
from genlm_core.runtime import ComputeGate, thaw_heap
from genlm_core.tokenization import Token, decode_vocab


class ModelState(enum.Enum):
    """A model's one lifecycle, in order: open, draining, closed (see [`AsyncLMBase.close`][])."""

    OPEN = "open"  #: takes calls
    DRAINING = "draining"  #: takes none; those made are answered or failed, resources go
    CLOSED = "closed"  #: released: every call raises ModelClosedError


#: Read on every call (``_check_open``): a module constant is cheaper than an Enum lookup.
_OPEN = ModelState.OPEN


class AsyncLMBase(ABC):
    """Base class for backends: vocabulary, validation, sampling and lifecycle.

    Subclasses implement [`next_token_logprobs`][] and
    [`next_token_logprobs_sync`][] (or subclass [`BatchedAsyncLM`][]), and
    a ``from_name`` classmethod. A call's ``lora_name`` names an adapter added with
    [`add_new_lora`][]; None is the base model.

    Args:
        tokenizer: A Hugging Face tokenizer (or anything [`decode_vocab`][] accepts).
        vocab_size: Width of the model's logits when wider than the tokenizer;
            extra ids get empty byte strings.
        byte_vocab: Precomputed ``(byte_vocab, str_vocab)`` to skip decoding.

    Attributes:
        max_positions: The model's context length, or None if unknown (set by backends);
            [`validate_token_ids`][] rejects longer prompts.
        thread_safe: Class attribute: True lets the core run two computations at once
            (default False: never, whichever threads call).
        row_device: Where the returned log-prob rows live: the CPU (default), or the
            model's GPU for a backend that offers it (genlm-hf's ``row_device="model"``).
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
        self._gate = ComputeGate(concurrent=self.thread_safe)
        hooks = self._adapter_hooks()
        self._adapters = LoraAdapters(
            hooks or self,
            self._gate,
            supported=hooks is not None,
            forget_outputs=self._forget_adapter_outputs,
        )
        self._state = ModelState.OPEN
        self._close_lock = threading.RLock()  # a second close() returns once the first is done

    def _adapter_hooks(self) -> Any:
        """What loads this model's adapters: itself if it overrides load_adapter, else None."""
        return self if type(self).load_adapter is not AsyncLMBase.load_adapter else None

    @classmethod
    def from_name(cls, model_name: str, **opts: Any) -> AsyncLMBase:
        """Load a model by hub name or local directory. Backends override this."""
        raise NotImplementedError(f"{cls.__name__} does not implement from_name()")

    @abstractmethod
    async def next_token_logprobs(
        self, token_ids: Sequence[int], lora_name: str | None = None
    ) -> torch.Tensor:
        """Log-probabilities of the next token after ``token_ids`` (non-empty).

        Returns:
            A float32 tensor of shape ``(len(byte_vocab),)`` with ``logsumexp == 0``, on
            [`row_device`][] (the CPU unless the backend was asked otherwise).
        """

    @abstractmethod
    def next_token_logprobs_sync(
        self, token_ids: Sequence[int], lora_name: str | None = None
    ) -> torch.Tensor:
        """Synchronous [`next_token_logprobs`][]."""

    async def batch_next_token_logprobs(
        self, token_ids_list: Sequence[Sequence[int]], lora_name: str | None = None
    ) -> torch.Tensor:
        """Log-probabilities for several prompts, stacked into ``(len(list), vocab)``."""
        reqs = self.make_requests(token_ids_list, lora_name)
        outs = await asyncio.gather(
            *(self.next_token_logprobs(r.token_ids, lora_name=lora_name) for r in reqs)
        )
        return torch.stack(outs) if outs else self._no_rows()

    def batch_next_token_logprobs_sync(
        self, token_ids_list: Sequence[Sequence[int]], lora_name: str | None = None
    ) -> torch.Tensor:
        """Synchronous [`batch_next_token_logprobs`][]."""
        reqs = self.make_requests(token_ids_list, lora_name)
        outs = [self.next_token_logprobs_sync(r.token_ids, lora_name=lora_name) for r in reqs]
        return torch.stack(outs) if outs else self._no_rows()

    def _no_rows(self) -> torch.Tensor:
        """The answer to an empty batch: ``(0, vocab)`` float32 on [`row_device`][]."""
        return torch.empty((0, len(self.byte_vocab)), dtype=torch.float32, device=self.row_device)

    async def prefix_next_token_logprobs(
        self, token_ids: Sequence[int], lora_name: str | None = None, *, start: int = 0
    ) -> torch.Tensor:
        """Next-token log-probabilities after every prefix of ``token_ids``.

        Row ``j`` equals ``next_token_logprobs(token_ids[: start + j + 1])``. This
        default batches the per-prefix calls; genlm-hf computes them in one forward.
        ``start`` (``0 <= start < len(token_ids)``) skips rows already computed.

        Returns:
            A float32 tensor on [`row_device`][] of shape
            ``(len(token_ids) - start, len(byte_vocab))``.

        Raises:
            InvalidTokenIdsError: Bad ``token_ids`` (see [`validate_token_ids`][]).
            InvalidArgumentError: ``start`` out of range.
        """
        req = self.make_prefix_request(token_ids, lora_name, start)
        return await self.batch_next_token_logprobs(
            [p.token_ids for p in req.prefixes()], lora_name=req.lora_name
        )

    def prefix_next_token_logprobs_sync(
        self, token_ids: Sequence[int], lora_name: str | None = None, *, start: int = 0
    ) -> torch.Tensor:
        """Synchronous [`prefix_next_token_logprobs`][]."""
        req = self.make_prefix_request(token_ids, lora_name, start)
        return self.batch_next_token_logprobs_sync(
            [p.token_ids for p in req.prefixes()], lora_name=req.lora_name
        )

    def make_prefix_request(
        self, token_ids: Any, lora_name: str | None = None, start: int = 0
    ) -> PrefixRequest:
        """Validate a prefix call's arguments into a [`PrefixRequest`][]."""
        req = self.make_request(token_ids, lora_name)
        n = len(req.token_ids)
        if not is_int_at_least(start, 0) or start >= n:
            raise InvalidArgumentError(
                f"start must be an integer in 0..{n - 1} (a position of the {n} token ids), "
                f"got {start!r}"
            )
        return PrefixRequest(req.token_ids, req.lora_name, int(start), req.generation)

    @property
    def vocab_size(self) -> int:
        """Width of the log-probability vectors (token ids are ``0 .. vocab_size-1``)."""
        return len(self.byte_vocab)

    def validate_token_ids(self, token_ids: Any) -> tuple[int, ...]:
        """Check a prompt and return it as a tuple of Python ints.

        Raises:
            InvalidTokenIdsError: Empty, not a sequence of integers, out of range, or
                longer than [`max_positions`][].
        """
        return checked_token_ids(token_ids, len(self.byte_vocab), self.max_positions)

    def make_request(self, token_ids: Any, lora_name: str | None = None) -> Request:
        """Validate a call's arguments into a hashable [`Request`][]."""
        self._check_open()
        ids = self.validate_token_ids(token_ids)
        return Request(ids, lora_name, self._adapters.generation(lora_name))

    def make_requests(
        self,
        token_ids_list: Sequence[Any],
        lora_name: str | None = None,
        *,
        argument: str = "token_ids_list",
    ) -> list[Request]:
        """[`make_request`][] for each prompt of a batch call.

        ``argument`` is the caller's name for ``token_ids_list`` in errors, which name the
        bad prompt (``token_ids_list[i]``) and why ([`InvalidTokenIdsError`][]).
        """
        self._check_open()
        if isinstance(token_ids_list, (str, bytes)) or not isinstance(token_ids_list, Iterable):
            raise InvalidTokenIdsError(
                f"{argument} must be a list of prompts (lists of token ids), got "
                f"{type(token_ids_list).__name__} {token_ids_list!r:.80}"
            )
        generation = self._adapters.generation(lora_name)
        requests = []
        for i, token_ids in enumerate(token_ids_list):
            try:
                requests.append(Request(self.validate_token_ids(token_ids), lora_name, generation))
            except InvalidTokenIdsError as exc:
                raise InvalidTokenIdsError(f"{argument}[{i}]: {exc}") from None
        return requests

    @contextlib.contextmanager
    def exclusive_access(self) -> Iterator[None]:
        """Hold the model with no computation running, for changes to it (reentrant).

        Waits for the computations in flight and holds new ones back until the block ends.
        """
        with self._gate.exclusive():
            yield

    def add_new_lora(self, lora_path: str | os.PathLike[str], lora_name: str = "lora_1") -> None:
        """Load a LoRA adapter under ``lora_name``; select it per call with ``lora_name=``.

        Loading under a name already loaded replaces that adapter: every call that
        starts after this returns computes with the new one (cached rows of the old one
        are dropped and never served). If loading fails the old adapter stays.

        Raises:
            LoraNotSupportedError: The backend cannot load adapters.
            ValueError: ``lora_name`` is not a non-empty string.
            Exception: Whatever the backend's [`load_adapter`][] raises for a bad path.
        """
        self._check_open()
        self._adapters.add(lora_path, lora_name)

    def remove_lora(self, lora_name: str) -> None:
        """Unload an adapter added with [`add_new_lora`][], with its cached outputs.

        Requests for it that are still waiting fail with [`UnknownLoraError`][];
        requests for the base model or other adapters are unaffected.

        Raises:
            UnknownLoraError: No adapter of that name is loaded.
        """
        self._check_open()
        self._adapters.remove(lora_name)

    async def add_new_lora_async(
        self, lora_path: str | os.PathLike[str], lora_name: str = "lora_1"
    ) -> None:
        """[`add_new_lora`][] for coroutines, waited for off the event loop."""
        await asyncio.to_thread(self.add_new_lora, lora_path, lora_name)

    async def remove_lora_async(self, lora_name: str) -> None:
        """[`remove_lora`][] for coroutines, waited for off the event loop."""
        await asyncio.to_thread(self.remove_lora, lora_name)

    @property
    def lora_names(self) -> list[str]:
        """Names of the loaded LoRA adapters."""
        return self._adapters.names()

    def validate_lora(self, lora_name: str | None) -> str | None:
        """Check that ``lora_name`` is None or an added adapter (else UnknownLoraError)."""
        self._adapters.generation(lora_name)
        return lora_name

    def adapter_handle(self, request: Request | PrefixRequest) -> Any:
        """The backend's handle of the adapter version ``request`` was made for (None: base).

        Always succeeds during a computation; elsewhere raises UnknownLoraError if that
        version was replaced or removed.
        """
        return self._adapters.handle(request)

    def load_adapter(self, adapter: LoraAdapter) -> Any:
        """Backend hook: load one adapter version; return the handle computations use.

        Called with the model held exclusively; [`adapter_handle`][] gives the handle
        back during computations. Load under ``adapter.engine_name`` if the engine keys
        adapters by name (the old version is unloaded after this returns); raise to
        refuse, and nothing changes. See docs/plugins.md, "LoRA adapters: two hooks".
        """
        raise LoraNotSupportedError(f"{type(self).__name__} does not support LoRA adapters")

    def unload_adapter(self, adapter: LoraAdapter, handle: Any) -> None:  # noqa: B027
        """Backend hook: unload a version [`load_adapter`][] loaded (replaced or removed).

        Called with the model held exclusively; drop anything cached for it (keys and
        values). Default: nothing.
        """

    def _forget_adapter_outputs(self, lora_name: str) -> None:  # noqa: B027 - a hook
        """Drop cached outputs of adapter ``lora_name`` (replaced or removed). Default: none."""

    async def sample(
        self,
        prompt_token_ids: Sequence[int],
        max_tokens: int,
        eos_token_ids: Iterable[int],
        temperature: float = 1.0,
        seed: int | None = None,
        lora_name: str | None = None,
    ) -> list[int]:
        """Sample continuation token ids, stopping at an EOS id or ``max_tokens`` (>= 0).

        The EOS id is not included in the result. Logits are divided by ``temperature``
        (> 0); a ``seed`` makes the sample reproducible.
        """
        prompt = list(self.make_request(prompt_token_ids, lora_name).token_ids)
        eos, generator = sampling_args(max_tokens, eos_token_ids, temperature, seed)
        out: list[int] = []
        for _ in range(max_tokens):
            logprobs = await self.next_token_logprobs(prompt + out, lora_name=lora_name)
            token = draw(logprobs, temperature, generator)
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
        args = (max_tokens, eos, temperature)
        samples = (
            self.sample(ids, *args, None if seed is None else seed + i, lora_name)
            for i, ids in enumerate(prompt_token_ids_list)
        )
        return list(await asyncio.gather(*samples))

    def clear_cache(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Drop cached outputs. The base class caches nothing."""

    def _check_open(self) -> None:
        if self._state is not _OPEN:
            raise self._closed_error()

    def _closed_error(self) -> ModelClosedError:
        """The error of every call made, queued or starting to compute after close()."""
        source = getattr(self.tokenizer, "name_or_path", None)
        name = type(self).__name__ + (
            f" ({source!r})" if isinstance(source, str) and source else ""
        )
        return ModelClosedError(
            f"{name} was closed (close(), aclose() or the end of a `with` block) before "
            f"this call was computed; load the model again to keep using it"
        )

    @property
    def state(self) -> ModelState:
        """Where the model is in its lifecycle: open, draining (closing) or closed."""
        return self._state

    @property
    def closed(self) -> bool:
        """True once [`close`][] or [`aclose`][] began: the model takes no new call."""
        return self._state is not ModelState.OPEN

    def close(self) -> None:
        """Release the model's resources. Idempotent; later calls raise ModelClosedError.

        The model drains, then closes: queued calls fail, a computation running finishes
        first (this waits for it), and none starts once this returns. From a coroutine,
        ``await`` [`aclose`][], which first answers the calls already made.
        """
        if type(self).cleanup is not _compat.cleanup:
            self.cleanup()  # a subclass written against genlm-backend's name: its super() ends
        else:
            self._close()

    def _close(self) -> None:
        with self._close_lock:
            if self._state is ModelState.CLOSED:
                return
            self._state = ModelState.DRAINING
            self._gate.close(self._closed_error)  # waits for the computations running
            self._release()
            self._state = ModelState.CLOSED
        thaw_heap()  # a model frozen by the byte states' builds can be collected again

    async def aclose(self) -> None:
        """[`close`][] for coroutines, waited for off the event loop. Idempotent.

        What ``async with lm:`` does on exit.
        """
        await asyncio.to_thread(self.close)

    # genlm-backend's names for close(), kept for its clients (genlm_core.compat).
    cleanup = _compat.cleanup
    cleanup_async = _compat.cleanup_async

    def _release(self) -> None:
        """Free backend resources once; overrides call ``super()._release()``.

        This unloads the adapters (one that fails is logged) and drops cached outputs.
        """
        self._adapters.unload_all()
        self.clear_cache()

    def __enter__(self) -> AsyncLMBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> AsyncLMBase:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

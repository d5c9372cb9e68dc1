"""The base of the AsyncLM contract: the consumer Protocol, requests, and AsyncLMBase.

:class:`AsyncLM` is what clients may call; :class:`AsyncLMBase` is what a backend
subclasses (vocabulary, validation, batch and prefix calls, sampling, lifecycle).
:mod:`genlm_core.lm` is the public module: import from there.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import numbers
import os
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

import torch

from genlm_core.adapters import AdapterTable, LoraAdapter, new_generation
from genlm_core.compute_gate import ComputeGate
from genlm_core.errors import (
    InvalidArgumentError,
    InvalidTokenIdsError,
    LoraNotSupportedError,
    ModelClosedError,
    UnknownLoraError,
)
from genlm_core.tokenization import Token, decode_vocab
from genlm_core.validation import is_int_at_least, is_integer

__all__ = ["AsyncLM", "AsyncLMBase", "PrefixRequest", "Request", "sampling_args"]

log = logging.getLogger(__name__)


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
    """One next-token query: the prompt and the LoRA adapter (None = base model).

    ``generation`` is the version of the adapter the request was made for (0 for the
    base model; see :mod:`genlm_core.adapters`): requests and cached rows of a replaced
    adapter never equal those of its successor.
    """

    token_ids: tuple[int, ...]
    lora_name: str | None
    generation: int = 0


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
    generation: int = 0

    def prefixes(self) -> list[Request]:
        """The next-token requests it answers, in order."""
        ids, lora, gen = self.token_ids, self.lora_name, self.generation
        return [Request(ids[: i + 1], lora, gen) for i in range(self.start, len(ids))]


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
        thread_safe: Class attribute. False (the default): the core never runs two of
            this backend's computations at once, whichever threads call. A backend
            whose computation is safe to run concurrently sets it True.
    """

    max_positions: int | None = None
    thread_safe: bool = False

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
        # Fast path, on every call of a sampler: plain ints, all in range.
        if all(type(t) is int for t in ids) and 0 <= min(ids) and max(ids) < n:
            return ids
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
        return ids

    def validate_lora(self, lora_name: str | None) -> str | None:
        """Check that ``lora_name`` is None or an added adapter.

        Raises:
            UnknownLoraError: The adapter was never added (or was removed).
        """
        self._generation(lora_name)
        return lora_name

    def _generation(self, lora_name: str | None) -> int:
        """The current version of ``lora_name`` (0: the base model)."""
        if lora_name is None:
            return 0
        generation = self._adapters.generation(lora_name) if isinstance(lora_name, str) else None
        if generation is None:
            raise UnknownLoraError(self._unknown_lora_message(lora_name))
        return generation

    def _unknown_lora_message(self, lora_name: Any) -> str:
        known = ", ".join(map(repr, self._adapters.names())) or "none"
        return (
            f"unknown LoRA adapter {lora_name!r} (loaded: {known}); add it first with "
            f"lm.add_new_lora(path, {lora_name!r}), or pass lora_name=None for the base model"
        )

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

    # -- LoRA -------------------------------------------------------------------
    #
    # The core keeps the table of adapters (names, versions, the backend's handles) and
    # calls the backend's two hooks with the model held exclusively: no batch computes
    # while an adapter is loaded or unloaded (see genlm_core.adapters).

    def add_new_lora(self, lora_path: str | os.PathLike[str], lora_name: str = "lora_1") -> None:
        """Load a LoRA adapter under ``lora_name``; select it per call with ``lora_name=``.

        Loading under a name already loaded replaces that adapter: every call that
        starts after this returns computes with the new one (cached rows of the old one
        are dropped and never served). If loading fails the old adapter stays.

        Raises:
            LoraNotSupportedError: The backend cannot load adapters.
            ValueError: ``lora_name`` is not a non-empty string.
            Exception: Whatever the backend's :meth:`load_adapter` raises for a bad path.
        """
        self._check_open()
        if not isinstance(lora_name, str) or not lora_name:
            raise InvalidArgumentError(f"lora_name must be a non-empty string, got {lora_name!r}")
        if type(self).load_adapter is AsyncLMBase.load_adapter:
            raise LoraNotSupportedError(
                f"{type(self).__name__} does not support LoRA adapters; load a merged model "
                f"instead, or use a backend that serves adapters (hf, vllm, sgl, mlx)"
            )
        adapter = LoraAdapter(lora_name, os.fspath(lora_path), new_generation())
        with self.exclusive_access():
            handle = self.load_adapter(adapter)
            old = self._adapters.put(adapter, handle)
            if old is not None:
                self.unload_adapter(*old)
            self._forget_adapter_outputs(lora_name)

    def remove_lora(self, lora_name: str) -> None:
        """Unload an adapter added with :meth:`add_new_lora`, with its cached outputs.

        Requests for it that are still waiting fail with :class:`UnknownLoraError`;
        requests for the base model or other adapters are unaffected.

        Raises:
            UnknownLoraError: No adapter of that name is loaded.
        """
        self._check_open()
        with self.exclusive_access():
            entry = self._adapters.pop(lora_name)
            if entry is None:
                raise UnknownLoraError(self._unknown_lora_message(lora_name))
            self.unload_adapter(*entry)
            self._forget_adapter_outputs(lora_name)

    @property
    def lora_names(self) -> list[str]:
        """Names of the loaded LoRA adapters."""
        return self._adapters.names()

    def load_adapter(self, adapter: LoraAdapter) -> Any:
        """Backend hook: load one adapter version; return the handle computations use.

        Called by :meth:`add_new_lora` with the model held exclusively. Load it under a
        name unique to this version (``adapter.engine_name``) if the engine keys
        adapters by name: the version it replaces is unloaded only after this returns.
        Raise to refuse (bad path, wrong base model): nothing changes then.

        Args:
            adapter: The name, path and generation of the version to load.

        Returns:
            Whatever the backend needs to compute with it (an engine id, a request
            object); :meth:`adapter_handle` gives it back during computations.
        """
        raise LoraNotSupportedError(f"{type(self).__name__} does not support LoRA adapters")

    def unload_adapter(self, adapter: LoraAdapter, handle: Any) -> None:  # noqa: B027
        """Backend hook: unload a version :meth:`load_adapter` loaded (replaced or removed).

        Called with the model held exclusively; drop anything cached for it (keys and
        values). Default: nothing.
        """

    def adapter_handle(self, request: Request | PrefixRequest) -> Any:
        """The backend's handle of the adapter version ``request`` was made for (None: base).

        The core only hands a backend requests whose version is loaded, so during a
        computation this always succeeds.

        Raises:
            UnknownLoraError: That version was replaced or removed.
        """
        if request.lora_name is None:
            return None
        entry = self._adapters.get(request.lora_name)
        if entry is None or entry[0].generation != request.generation:
            raise UnknownLoraError(
                f"LoRA adapter {request.lora_name!r} (version {request.generation}) was "
                f"replaced or removed; make the request again"
            )
        return entry[1]

    def _forget_adapter_outputs(self, lora_name: str) -> None:  # noqa: B027 - a hook
        """Drop cached outputs of adapter ``lora_name`` (replaced or removed). Default: none."""

    @contextlib.contextmanager
    def exclusive_access(self) -> Iterator[None]:
        """Hold the model with no computation running (for changes to it).

        Waits for the computations in flight and holds new ones back until the block
        ends. Backends use it around changes made outside a computation (clearing a
        key/value cache, freeing the model); reentrant for the thread that holds it.
        """
        with self._gate.exclusive():
            yield

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

    async def aclose(self) -> None:
        """Wait for the calls in flight to get their answers, then :meth:`cleanup`.

        What ``async with lm:`` does on exit. Idempotent.
        """
        self.cleanup()

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
    if is_integer(eos_token_ids):
        raise ValueError(
            f"eos_token_ids must be a list of ints, got the int {eos_token_ids}; "
            f"wrap it: [{eos_token_ids}]"
        )
    if isinstance(eos_token_ids, (str, bytes)) or not isinstance(eos_token_ids, Iterable):
        raise ValueError(f"eos_token_ids must be a list of ints, got {eos_token_ids!r:.80}")
    eos_list = list(eos_token_ids)
    for i, t in enumerate(eos_list):
        if not is_integer(t):
            raise ValueError(
                f"eos_token_ids[{i}] = {t!r} is a {type(t).__name__}, not an int token id"
            )
    eos = frozenset(int(t) for t in eos_list)
    generator = None
    if seed is not None:
        if not is_integer(seed):
            raise ValueError(f"seed must be an integer or None, got {seed!r}")
        generator = torch.Generator()
        generator.manual_seed(int(seed))
    return eos, generator


def _draw(logprobs: torch.Tensor, temperature: float, generator: torch.Generator | None) -> int:
    logits = logprobs.float() if temperature == 1.0 else logprobs.float() / temperature
    probs = torch.softmax(logits, dim=-1)
    return int(torch.multinomial(probs, num_samples=1, generator=generator).item())

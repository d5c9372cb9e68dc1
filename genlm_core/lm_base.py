"""The base of the AsyncLM contract: the consumer Protocol, requests, and AsyncLMBase.

:class:`AsyncLM` is what clients may call; :class:`AsyncLMBase` is what a backend
subclasses (vocabulary, validation, batch and prefix calls, sampling, lifecycle).
:mod:`genlm_core.lm` is the public module: import from there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import numbers
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

import torch

from genlm_core.errors import (
    InvalidArgumentError,
    InvalidTokenIdsError,
    ModelClosedError,
    UnknownLoraError,
)
from genlm_core.tokenization import Token, decode_vocab
from genlm_core.validation import is_int_at_least, is_integer

__all__ = ["AsyncLM", "AsyncLMBase", "PrefixRequest", "Request", "sampling_args"]


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

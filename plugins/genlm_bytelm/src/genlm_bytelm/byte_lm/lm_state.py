"""``StatefulTokenizedLM`` (a token context over an AsyncLM) and ``StatefulByteLM``.

``StatefulByteLM`` is the abstract byte-level LM with genlm-bytes' ``greedy`` and
``sample`` loops; both byte states implement it, through ``CandidateStates``.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from genlm_bytelm.display import escape
from genlm_bytelm.errors import InvalidByteError, MissingStartTokenError
from genlm_bytelm.probs import EOS, logsumexp
from genlm_bytelm.shared_tries import is_shared
from genlm_core.checks import is_integer
from genlm_core.errors import InvalidTokenIdsError

__all__ = [
    "CandidateStates",
    "StatefulByteLM",
    "StatefulTokenizedLM",
    "initial_token_ids",
    "sample_dict",
    "start_token_id",
]


def start_token_id(tokenizer: Any) -> int:
    """The token a context starts with: the tokenizer's BOS, else its EOS (Qwen has no BOS).

    Raises:
        MissingStartTokenError: The tokenizer has neither.
    """
    for name in ("bos_token_id", "eos_token_id"):
        value = getattr(tokenizer, name, None)
        if isinstance(value, int):
            return value
    raise MissingStartTokenError(
        f"{type(tokenizer).__name__} has no bos_token_id and no eos_token_id to start the "
        f"context with; pass the token ids to start from as initial_context=[...] to "
        f"ExactByteState.initial, ByteBeamState.initial or StatefulTokenizedLM.initial"
    )


def initial_token_ids(model: Any, initial_context: Any) -> list[int]:
    """The token ids a byte state starts from: ``initial_context``, else the start token.

    Raises:
        MissingStartTokenError: No ``initial_context`` and the tokenizer has no BOS or EOS.
        InvalidTokenIdsError: ``initial_context`` is not a non-empty list of token ids.
    """
    if initial_context is None:
        return [start_token_id(model.tokenizer)]
    if isinstance(initial_context, str | bytes) or not isinstance(initial_context, Sequence):
        raise InvalidTokenIdsError(
            f"initial_context must be a list of token ids, got {type(initial_context).__name__} "
            f"{initial_context!r:.80}; encode text first, e.g. "
            f"[tokenizer.bos_token_id, *tokenizer.encode(prompt, add_special_tokens=False)]"
        )
    ids = list(initial_context)
    if not ids:
        raise InvalidTokenIdsError(
            "initial_context is empty; pass at least one token id (e.g. the tokenizer's BOS), "
            "or None for the model's start token"
        )
    n = len(model.byte_vocab)
    for position, token in enumerate(ids):
        if not is_integer(token) or not 0 <= int(token) < n:
            raise InvalidTokenIdsError(
                f"initial_context[{position}] = {token!r} is not a token id of this model "
                f"(integers 0..{n - 1})"
            )
    return [int(t) for t in ids]


class StatefulTokenizedLM:
    """An immutable token context over an AsyncLM: ``state << token`` is a new state.

    Args:
        model: The token-level language model (any AsyncLM).
        context: Token ids of the context (a list).
        n_calls: Model calls made along this context (kept from genlm-bytes).
        max_context_length: Keep only the last ``max_context_length`` tokens.
    """

    def __init__(
        self,
        model: Any,
        context: list[int],
        n_calls: int = 0,
        max_context_length: int | None = None,
    ) -> None:
        self.model = model
        self.context = context
        self._n_calls = n_calls
        self.max_context_length = max_context_length

    @classmethod
    def initial(
        cls,
        model: Any,
        initial_context: Sequence[int] | None = None,
        max_context_length: int | None = None,
    ) -> StatefulTokenizedLM:
        """A state at ``initial_context`` (default: ``[start_token_id(tokenizer)]``)."""
        if initial_context is None:
            initial_context = [start_token_id(model.tokenizer)]
        return cls(model, list(initial_context), max_context_length=max_context_length)

    def __lshift__(self, token: int) -> StatefulTokenizedLM:
        """The state after appending ``token`` (the context is trimmed to the maximum)."""
        if not is_integer(token):
            raise InvalidTokenIdsError(f"a token id must be an int, got {token!r}")
        context = self.context
        limit = self.max_context_length
        if limit is not None and len(context) >= limit:
            context = context[len(context) - limit + 1 :] if limit > 1 else []
        return StatefulTokenizedLM(
            self.model, [*context, int(token)], self._n_calls, self.max_context_length
        )

    async def logp_next(self) -> Any:
        """The model's next-token log-probabilities after this context (a torch tensor)."""
        self._n_calls += 1
        return await self.model.next_token_logprobs(self.context)

    def __repr__(self) -> str:
        vocab = self.model.byte_vocab
        return "|".join(escape(bytes(vocab[x])) for x in self.context)


def sample_dict(probs: Mapping[Any, float]) -> Any:
    """A key of ``probs`` drawn in proportion to its value (genlm-bytes' inverse-CDF sampler)."""
    keys = list(probs.keys())
    cdf = np.cumsum(np.fromiter(probs.values(), dtype=np.float64, count=len(keys)))
    return keys[int(cdf.searchsorted(np.random.uniform(0, 1) * cdf[-1]))]


class StatefulByteLM(ABC):
    """A byte-level language model whose state advances one byte at a time."""

    @abstractmethod
    async def __lshift__(self, b: int) -> StatefulByteLM:
        """The state after byte ``b``."""

    def prune(self) -> StatefulByteLM:
        """The state with unlikely candidates dropped (subclasses define how)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement prune()")

    @abstractmethod
    async def logp_next(self) -> Any:
        """Log-probabilities of the next byte, EOT and EOS (a ``LazyByteProbs``)."""

    async def prefill(self, bs: Any) -> StatefulByteLM:
        """The state after the bytes ``bs`` (default: one ``prune() << b`` per byte)."""
        state = self
        for b in bs:
            state = await (state.prune() << b)
        return state

    async def greedy(self, context: Any, steps: int) -> bytes:
        """``context`` (prefilled first) followed by ``steps`` most likely bytes (fewer at EOS)."""
        return await self._generate(context, steps, lambda probs: probs.argmax())

    async def sample(
        self, context: Any, steps: int, draw: Callable[[Any], Any] = sample_dict
    ) -> bytes:
        """``context`` (bytes, prefilled first) followed by ``steps`` sampled bytes (fewer at EOS).

        ``draw`` picks a key from a ``Chart`` of probabilities (bytes 0-255, ``None`` for EOT,
        257 for EOS); by default in proportion to them.
        """
        return await self._generate(
            context, steps, lambda probs: draw(probs.materialize().map_values(np.exp))
        )

    async def _generate(self, context: Any, steps: int, choose: Callable[[Any], Any]) -> bytes:
        if not is_integer(steps) or steps < 0:
            raise InvalidByteError(f"steps must be an integer >= 0, got {steps!r}")
        out = list(_as_bytes(context))
        state = await self.prefill(out)
        for _ in range(steps):
            b = choose(await state.logp_next())
            if b == EOS or b is None:  # the end of the sequence (EOT cannot be generated)
                break
            state = await (state.prune() << b)
            out.append(b)
        return bytes(out)

    async def cleanup(self) -> None:  # noqa: B027 - optional hook
        """Release what the state holds (default: nothing)."""


class CandidateStates(StatefulByteLM):
    """A byte state held as trie states ``states`` (heaviest first): both byte states' base."""

    states: list[Any]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.states)

    def __len__(self) -> int:
        return len(self.states)

    @functools.cached_property
    def logZ(self) -> float:  # noqa: N802 - genlm-bytes' name
        """Log of the candidates' total weight: the log-probability of the bytes read.

        ``ByteBeamState``'s estimates it; ``ExactByteState``'s is exact (as a prefix of the text).
        """
        return logsumexp([s.weight for s in self.states])

    async def cleanup(self) -> None:
        """Stop the batching of a trie these states do not share (shared tries live on)."""
        for trie in {id(s.trie): s.trie for s in self.states}.values():
            if not is_shared(trie):
                await trie.cleanup()


def advance_all(states: Sequence[Any], b: int) -> list[Any]:
    """``state << b`` for each of ``states``, the None (no such edge) left out."""
    return [advanced for advanced in (state << b for state in states) if advanced is not None]


def _as_bytes(data: Any) -> bytes:
    """``data`` (bytes-like, or an iterable of ints 0-255) as bytes, or a clear error."""
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    if isinstance(data, str):
        raise InvalidByteError(
            f"expected bytes, got the str {data[:40]!r}; encode it first: text.encode('utf-8')"
        )
    try:
        return bytes(data)
    except (TypeError, ValueError) as exc:
        raise InvalidByteError(
            f"expected bytes or a sequence of ints 0-255, got {type(data).__name__} "
            f"{data!r:.80} ({exc})"
        ) from None

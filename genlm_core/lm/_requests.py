"""The queries a model computes (next-token and prefix requests), and the prompts' check."""

from __future__ import annotations

import ctypes
import dataclasses
from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np
import torch

from genlm_core.checks import is_integer
from genlm_core.errors import InvalidTokenIdsError

#: Prompts of at least this many tokens keep their hash (see [`LongTokenIds`][]).
LONG_PROMPT = 256


class LongTokenIds(tuple):  # noqa: SLOT001 (the cached hash lives in the instance dict)
    """A long prompt's token ids that hash once (equal to, and hashing like, the tuple).

    A request is looked up about ten times on its way: for a 250k-token context a
    tuple's hash would cost 4 ms a request.
    """

    def __hash__(self) -> int:
        try:
            return self.__dict__["_hash"]
        except KeyError:
            value = self.__dict__["_hash"] = tuple.__hash__(self)
            return value


def token_ids_key(ids: tuple[int, ...]) -> tuple[int, ...]:
    """``ids`` as a request holds them: long ones as [`LongTokenIds`][] (of ints)."""
    if len(ids) >= LONG_PROMPT and type(ids) is tuple:
        _untrack(ids := LongTokenIds(ids))  # else every collection reads every id of every key
    return ids


_untrack = ctypes.pythonapi.PyObject_GC_UnTrack  # ints make no cycles; CPython never untracks
_untrack.argtypes, _untrack.restype = [ctypes.py_object], None


class Request(NamedTuple):
    """One next-token query: the prompt and the LoRA adapter (None = base model).

    ``generation`` is the version of the adapter the request was made for (0 for the
    base model; see `genlm_core.lm._adapters`): requests and cached rows of a replaced
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
    equals (and is never deduplicated with) the [`Request`][] of the same tokens.
    """

    token_ids: tuple[int, ...]
    lora_name: str | None
    start: int = 0
    generation: int = 0

    def prefixes(self) -> list[Request]:
        """The next-token requests it answers, in order."""
        ids, lora, gen = self.token_ids, self.lora_name, self.generation
        return [
            Request(token_ids_key(ids[: i + 1]), lora, gen) for i in range(self.start, len(ids))
        ]


def checked_token_ids(token_ids: Any, n: int, limit: int | None) -> tuple[int, ...]:
    """``token_ids`` as a request's key: a tuple of Python ints in ``0..n-1``.

    Raises:
        InvalidTokenIdsError: Empty, not a sequence of integers, out of range, or
            longer than ``limit`` (the model's context), naming the bad id.
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


def _plain_ids_in_range(ids: tuple[Any, ...], n: int) -> bool:
    """Whether every id is a plain ``int`` in ``[0, n)``.

    Short prompts (~1 us) use ``min``/``max``; long ones NumPy (~20 ns a token, half
    the generator's time).
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

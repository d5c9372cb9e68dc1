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
    """A long prompt's token ids, hashed once (equal to the tuple of the same ids).

    A request is looked up about ten times on its way: for a 250k-token context a
    tuple's hash would cost 4 ms a request. The hash is [`prefix_hashes`][]'s, not the
    tuple's, so that every prefix of a sequence is hashed in one vectorised pass: make
    long keys with [`token_ids_key`][] (a plain tuple of the same ids is equal to one,
    but does not hash like it).
    """

    def __hash__(self) -> int:
        try:
            return self.__dict__["_hash"]
        except KeyError:
            array = np.fromiter(self, dtype=np.int64, count=len(self))
            (value,) = prefix_hashes(array, len(self))
            self.__dict__["_hash"] = value
            return value


def token_ids_key(ids: tuple[int, ...], array: np.ndarray | None = None) -> tuple[int, ...]:
    """``ids`` as a request holds them: long ones as [`LongTokenIds`][] (of ints).

    ``array``: the same ids as int64, when the caller has them (spares the hash a pass).
    """
    if len(ids) >= LONG_PROMPT and type(ids) is tuple:
        _untrack(ids := LongTokenIds(ids))  # else every collection reads every id of every key
        if array is not None:
            (ids.__dict__["_hash"],) = prefix_hashes(array, len(ids))
    return ids


#: A long key's hash: a polynomial in this (odd) multiplier over its ids, mod 2**64, then
#: mixed with its length by splitmix64's finaliser. Prefix sums make every prefix's hash
#: one vectorised pass; the finaliser spreads the bits a dict's probing reads.
_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)
_LENGTH_MIX = np.uint64(0xD6E8FEB86659FD93)
_powers = np.ones(1, dtype=np.uint64)  # _MULTIPLIER ** i mod 2**64, grown on demand


def prefix_hashes(array: np.ndarray, first: int) -> list[int]:
    """The [`LongTokenIds`][] hashes of ``ids[:k]`` for ``k`` in ``first .. len(ids)``.

    ``array``: the ids as an int64 array. About 2 ns a token, once for all prefixes.
    """
    global _powers
    n = len(array)
    if len(_powers) < n:  # grown by doubling; a race only computes the same table twice
        grown = np.full(max(n, 2 * len(_powers)), _MULTIPLIER, dtype=np.uint64)
        grown[0] = 1
        _powers = np.cumprod(grown, dtype=np.uint64)
    terms = array.view(np.uint64) + np.uint64(1)  # 0 + 1: appending id 0 changes the sum
    terms *= _powers[:n]
    x = np.cumsum(terms, dtype=np.uint64)[first - 1 :]
    x ^= np.arange(first, n + 1, dtype=np.uint64) * _LENGTH_MIX
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    signed = x.view(np.int64)
    signed[signed == -1] = -2  # what hash() makes of a __hash__ of -1
    return signed.tolist()


def _long_key(ids: tuple[int, ...], n: int, hashed: int) -> LongTokenIds:
    """``ids[:n]`` (long) as a [`LongTokenIds`][] whose hash is known."""
    key = LongTokenIds(ids[:n])
    key.__dict__["_hash"] = hashed
    _untrack(key)
    return key


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
    _prefixes: list[Request] | None = dataclasses.field(
        default=None, init=False, compare=False, hash=False, repr=False
    )
    #: The long prefixes' hashes: (length of the first, their hashes), made once.
    _long: tuple[int, list[int]] | None = dataclasses.field(
        default=None, init=False, compare=False, hash=False, repr=False
    )

    def prefixes(self) -> list[Request]:
        """The next-token requests it answers, in order (made once, then kept).

        Each long one copies its prefix of the ids: where only lookups are needed,
        [`lookup_keys`][] costs nothing per row.
        """
        if self._prefixes is None:
            object.__setattr__(self, "_prefixes", self._keys(_long_key))
        return self._prefixes  # type: ignore[return-value]

    def lookup_keys(self) -> list[Request]:
        """Keys equal to [`prefixes`][], for looking rows up: long ones copy nothing."""
        return self._prefixes if self._prefixes is not None else self._keys(_IdsPrefix)

    def prefix_hashes(self) -> list[int]:
        """The hash of each prefix's ids as its key holds them, in order."""
        ids, (first, hashes) = self.token_ids, self._long_hashes()
        short = range(self.start + 1, min(first, len(ids) + 1))
        return [hash(ids[:k]) for k in short] + hashes[max(0, self.start + 1 - first) :]

    def without_first(self, skip: int) -> PrefixRequest:
        """This request without its first ``skip`` rows (already known)."""
        if not skip:
            return self
        rest = dataclasses.replace(self, start=self.start + skip)
        object.__setattr__(rest, "_long", self._long)  # by length: the same for both
        if self._prefixes is not None:
            object.__setattr__(rest, "_prefixes", self._prefixes[skip:])
        return rest

    def _keys(self, long_key: Any) -> list[Request]:
        """One key a prefix: short ones plain tuples, long ones ``long_key(ids, n, hash)``."""
        ids, lora, gen = self.token_ids, self.lora_name, self.generation
        first, hashes = self._long_hashes()
        lo = max(self.start + 1, first)  # the shortest long prefix asked for
        short = [Request(ids[:k], lora, gen) for k in range(self.start + 1, min(lo, len(ids) + 1))]
        long = zip(range(lo, len(ids) + 1), hashes[lo - first :], strict=True)
        return short + [Request(long_key(ids, k, h), lora, gen) for k, h in long]

    def _long_hashes(self) -> tuple[int, list[int]]:
        """The long prefixes' hashes, from one vectorised pass over the ids (made once).

        Not one pass each: a 1 MB text asks for about 300k prefixes of 125k ids.
        """
        if self._long is None:
            ids, first = self.token_ids, max(self.start + 1, LONG_PROMPT)
            hashes = []
            if first <= len(ids):
                hashes = prefix_hashes(np.fromiter(ids, dtype=np.int64, count=len(ids)), first)
            object.__setattr__(self, "_long", (first, hashes))
        return self._long  # type: ignore[return-value]


class _IdsPrefix:
    """The first ``n`` of a long ``ids`` as a lookup key, never copied.

    Equal to, and hashing like, their [`LongTokenIds`][]; the copy is made only to
    compare, on a hash match. Never stored and never handed to a backend: only
    [`PrefixRequest.lookup_keys`][] makes them, to find cached rows.
    """

    __slots__ = ("_hash", "_ids", "_n")

    def __init__(self, ids: tuple[int, ...], n: int, hashed: int) -> None:
        self._ids, self._n, self._hash = ids, n, hashed

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, tuple):
            return len(other) == self._n and other == self._ids[: self._n]
        return NotImplemented

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index: Any) -> Any:  # for error messages (short_ids)
        return self._ids[: self._n][index]


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
    if (key := _plain_key(ids, n)) is not None:  # the fast path, on every call of a sampler
        return key
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


def _plain_key(ids: tuple[Any, ...], n: int) -> tuple[int, ...] | None:
    """``ids``' key if every id is a plain ``int`` in ``[0, n)``, else None.

    Short prompts (~1 us) use ``min``/``max``; long ones NumPy (~20 ns a token, half
    the generator's time), whose array the key's hash reuses.
    """
    if len(ids) < LONG_PROMPT:
        return ids if all(type(t) is int for t in ids) and 0 <= min(ids) and max(ids) < n else None
    if list(map(type, ids)).count(int) != len(ids):
        return None
    try:
        array = np.fromiter(ids, dtype=np.int64, count=len(ids))
    except OverflowError:
        return None
    return token_ids_key(ids, array) if array.min() >= 0 and array.max() < n else None

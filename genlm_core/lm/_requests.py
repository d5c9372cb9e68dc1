"""The queries a model computes: next-token requests and prefix requests."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

__all__ = ["LONG_PROMPT", "LongTokenIds", "PrefixRequest", "Request", "token_ids_key"]

#: Prompts of at least this many tokens keep their hash (see :class:`LongTokenIds`).
LONG_PROMPT = 256


class LongTokenIds(tuple):  # noqa: SLOT001 (the cached hash lives in the instance dict)
    """A long prompt's token ids that hash once.

    A tuple recomputes its hash at every dict lookup, and a request is looked up about
    ten times on its way (output cache, batcher, results): for a 250k-token context
    (a 1 MB text) that is 4 ms a request of pure hashing. Equal to, and hashing like,
    the plain tuple of the same ids, so the two find each other in any dict.
    """

    def __hash__(self) -> int:
        try:
            return self.__dict__["_hash"]
        except KeyError:
            value = self.__dict__["_hash"] = tuple.__hash__(self)
            return value


def token_ids_key(ids: tuple[int, ...]) -> tuple[int, ...]:
    """``ids`` as a request holds them: long ones as :class:`LongTokenIds`."""
    return LongTokenIds(ids) if len(ids) >= LONG_PROMPT and type(ids) is tuple else ids


class Request(NamedTuple):
    """One next-token query: the prompt and the LoRA adapter (None = base model).

    ``generation`` is the version of the adapter the request was made for (0 for the
    base model; see :mod:`genlm_core.lm._adapters`): requests and cached rows of a replaced
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
        return [
            Request(token_ids_key(ids[: i + 1]), lora, gen) for i in range(self.start, len(ids))
        ]

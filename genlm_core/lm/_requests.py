"""The queries a model computes: next-token requests and prefix requests."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

__all__ = ["PrefixRequest", "Request"]


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
        return [Request(ids[: i + 1], lora, gen) for i in range(self.start, len(ids))]

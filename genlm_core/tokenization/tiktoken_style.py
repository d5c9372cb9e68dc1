"""tiktoken-style tokenizers: the vocabulary is already bytes (``mergeable_ranks``).

Covers a ``tiktoken.Encoding`` and Hugging Face wrappers around one, found by duck
typing so tiktoken never needs importing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["TiktokenTables", "find_tiktoken_tables", "tiktoken_bytes"]

# Where wrappers keep their tiktoken.Encoding (the tokenizer itself comes first).
_WRAPPED_ATTRS = ("tokenizer", "model", "encoding", "encoder", "_tokenizer", "tt")


@dataclass(frozen=True)
class TiktokenTables:
    """The byte vocabulary of a tiktoken-style tokenizer.

    Attributes:
        ranks: Token bytes -> id (tiktoken calls ids "ranks").
        specials: Special token text -> id.
        owner: The object the tables came from (used to round-trip check them).
    """

    ranks: Mapping[bytes, int]
    specials: Mapping[str, int]
    owner: Any


def _ranks_of(obj: Any) -> Mapping[bytes, int] | None:
    for attr in ("mergeable_ranks", "_mergeable_ranks"):
        ranks = getattr(obj, attr, None)
        if isinstance(ranks, Mapping) and ranks and isinstance(next(iter(ranks)), bytes):
            return ranks
    return None


def find_tiktoken_tables(tokenizer: Any) -> TiktokenTables | None:
    """The rank tables if ``tokenizer`` is (or wraps) a tiktoken-style encoding, else None."""
    candidates = [tokenizer] + [getattr(tokenizer, a, None) for a in _WRAPPED_ATTRS]
    for obj in candidates:
        if obj is None:
            continue
        ranks = _ranks_of(obj)
        if ranks is None:
            continue
        specials: dict[str, int] = {}
        for holder in (obj, tokenizer):
            for attr in ("special_tokens", "_special_tokens"):
                found = getattr(holder, attr, None)
                if isinstance(found, Mapping):
                    specials.update(
                        (k, v)
                        for k, v in found.items()
                        if isinstance(k, str) and isinstance(v, int)
                    )
        return TiktokenTables(ranks=ranks, specials=specials, owner=obj)
    return None


def tiktoken_bytes(tables: TiktokenTables) -> tuple[list[bytes], list[str | None], set[int]]:
    """Lay the rank tables out by id: ``(byte_strings, texts, special_ids)``.

    Bytes per id (``b""`` at holes), the special tokens' text per id (``None``
    elsewhere), and the special ids.
    """
    size = max([*tables.ranks.values(), *tables.specials.values()], default=-1) + 1
    byte_strings = [b""] * size
    texts: list[str | None] = [None] * size
    for token, rank in tables.ranks.items():
        byte_strings[rank] = token
    for text, token_id in tables.specials.items():
        byte_strings[token_id] = text.encode()
        texts[token_id] = text
    return byte_strings, texts, set(tables.specials.values())

"""Which contexts reading known bytes will ask the model for, found without the model.

Whether a candidate survives a byte depends only on canonicality (the masks do not
depend on the model's probabilities), so the contexts an :class:`ExactByteState`
will materialize while reading a known text can be listed in advance: the canonical
tokenizations of the text's prefixes that can still go on with the text. ``prefill``
asks for all of them at once (one prefix call along the longest, one batched call for
the rest) and then builds the final candidates directly; generation asks, together
with the forward it needs anyway, for the contexts along the bytes it predicts next
(speculation), so that when the prediction holds the next bytes cost no forward.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Node", "plan"]


@dataclass(eq=False)
class Node:
    """A canonical context met while reading: it ends at ``end`` (an offset in the text).

    ``parent`` and ``token``: the context it extends by one token (None for the
    candidates reading starts from, whose ``origin`` is set).
    """

    lm_state: Any
    end: int
    parent: Node | None = None
    token: int | None = None
    origin: Any = None
    children: list[Node] = field(default_factory=list)


class Spellings:
    """Token ids by bytes, for the tokens spelling a text's segments."""

    def __init__(self, byte_vocab: list[bytes], allowed: Any) -> None:
        pairs = sorted((bytes(b), i) for i, b in enumerate(byte_vocab) if b and allowed(i))
        self.keys = [b for b, _ in pairs]
        self.ids = [i for _, i in pairs]
        self.longest = max((len(b) for b in self.keys), default=1)

    def exact(self, data: bytes) -> list[int]:
        """Ids of the tokens whose bytes are ``data``."""
        lo = bisect.bisect_left(self.keys, data)
        out = []
        while lo < len(self.keys) and self.keys[lo] == data:
            out.append(self.ids[lo])
            lo += 1
        return out

    def starts(self, prefix: bytes) -> bool:
        """Whether some token starts with ``prefix`` (or is it)."""
        lo = bisect.bisect_left(self.keys, prefix)
        return lo < len(self.keys) and self.keys[lo].startswith(prefix)

    def longer(self, prefix: bytes) -> list[int]:
        """Ids of the tokens that start with ``prefix`` and are longer."""
        lo = bisect.bisect_right(self.keys, prefix)
        out = []
        while lo < len(self.keys) and self.keys[lo].startswith(prefix):
            out.append(self.ids[lo])
            lo += 1
        return out


def plan(origins: list[tuple[Any, bytes]], text: bytes, spell: Spellings) -> list[Node]:
    """The contexts reading ``text`` will create, as a forest rooted at the origins.

    Args:
        origins: ``(lm_state, partial)`` of the candidates reading starts from: a
            context and the bytes its current token has read so far.
        text: The bytes to read.
        spell: The vocabulary by bytes.

    Returns:
        The origin nodes; every node's ``children`` are the canonical contexts one token
        longer that can still go on with the text (or end exactly at its end).
    """
    roots = []
    by_end: dict[int, list[Node]] = {}
    for lm_state, partial in origins:
        node = Node(lm_state, -len(partial), origin=(lm_state, partial))
        roots.append(node)
        _grow(node, text, spell, by_end, partial)
    for end in range(1, len(text)):  # children always end later than their parent
        for node in by_end.get(end, ()):
            _grow(node, text, spell, by_end, b"")
    return roots


def _grow(
    node: Node, text: bytes, spell: Spellings, by_end: dict[int, list[Node]], partial: bytes
) -> None:
    """Add ``node``'s children: canonical tokens ending inside ``text`` that can go on."""
    canon = node.lm_state.canon
    start = max(node.end, 0)
    for stop in range(start + 1, min(len(text), start + spell.longest) + 1):
        for token in spell.exact(partial + text[start:stop]):
            if not canon.valid_next(node.lm_state.pending, token):
                continue
            child = Node(node.lm_state << token, stop, parent=node, token=token)
            if stop == len(text) or can_go_on(child, text, spell):
                node.children.append(child)
                by_end.setdefault(stop, []).append(child)


def can_go_on(node: Node, text: bytes, spell: Spellings) -> bool:
    """Whether some canonical next token agrees with the rest of ``text`` after ``node``."""
    canon, pending = node.lm_state.canon, node.lm_state.pending
    rest = text[node.end :]
    for stop in range(1, min(len(rest), spell.longest) + 1):
        for token in spell.exact(rest[:stop]):
            if canon.valid_next(pending, token):
                return True
    if len(rest) < spell.longest:
        longer = spell.longer(rest)
        if len(longer) > 32:
            return bool(canon.mask(pending)[longer].any())
        return any(canon.valid_next(pending, t) for t in longer)
    return False


def walk(roots: list[Node]) -> list[Node]:
    """Every node below the roots (roots excluded), parents before children."""
    out, stack = [], list(reversed(roots))
    while stack:
        node = stack.pop()
        if node.parent is not None:
            out.append(node)
        stack.extend(reversed(node.children))
    return out

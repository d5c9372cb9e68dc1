"""Which contexts reading known bytes will ask the model for, found without the model.

Whether a candidate survives a byte depends only on canonicality (the masks do not
depend on the model's probabilities), so the contexts an :class:`ExactByteState`
will materialize while reading a known text can be listed in advance: the canonical
tokenizations of the text's prefixes that can still go on with the text. ``prefill``
asks for them window by window (:mod:`.exact_prefill`; :func:`plan` lists them for a
whole text at once, the unwindowed reading the tests compare it with) and then builds
the final candidates directly; generation asks, together
with the forward it needs anyway, for the contexts along the bytes it predicts next
(speculation), so that when the prediction holds the next bytes cost no forward.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Node", "Spellings", "plan", "reading", "walk"]


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
    alive: bool = True


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
        longer from which the text can be read to its end (contexts that a later byte
        rules out are dropped: reading never asks for them).
    """
    roots = []
    by_end: dict[int, list[Node]] = {}
    for lm_state, partial in origins:
        node = Node(lm_state, -len(partial), origin=(lm_state, partial))
        roots.append(node)
        _grow(node, text, spell, by_end, partial)
    for end in range(len(text)):  # children end later than their parent (or at 0)
        for node in by_end.get(end, ()):
            _grow(node, text, spell, by_end, b"")
    for end in sorted(by_end, reverse=True):  # keep what reaches the end of the text
        for node in by_end[end]:
            node.children = [c for c in node.children if c.alive]
            node.alive = end == len(text) or bool(node.children) or _runs_past(node, text, spell)
    for root in roots:
        root.children = [c for c in root.children if c.alive]
    return roots


def _grow(
    node: Node, text: bytes, spell: Spellings, by_end: dict[int, list[Node]], partial: bytes
) -> None:
    """Add ``node``'s children: canonical tokens ending inside ``text`` that can go on."""
    canon = node.lm_state.canon
    start = max(node.end, 0)
    first = start if partial else start + 1  # a read partial token may end right here
    for stop in range(first, min(len(text), start + spell.longest) + 1):
        if not spell.starts(partial + text[start:stop]):
            break  # no token goes on with these bytes
        for token in spell.exact(partial + text[start:stop]):
            if not canon.valid_next(node.lm_state.pending, token):
                continue
            child = Node(node.lm_state << token, stop, parent=node, token=token)
            if stop == len(text) or can_go_on(child, text, spell):
                node.children.append(child)
                by_end.setdefault(stop, []).append(child)


def _runs_past(node: Node, text: bytes, spell: Spellings) -> bool:
    """Whether a canonical next token after ``node`` spells the rest of ``text`` and more."""
    rest = text[node.end :]
    if len(rest) >= spell.longest:
        return False
    canon, pending = node.lm_state.canon, node.lm_state.pending
    longer = spell.longer(rest)
    if len(longer) > 32:
        return bool(canon.mask(pending)[longer].any())
    return any(canon.valid_next(pending, t) for t in longer)


def can_go_on(node: Node, text: bytes, spell: Spellings) -> bool:
    """Whether some canonical next token agrees with the rest of ``text`` after ``node``."""
    canon, pending = node.lm_state.canon, node.lm_state.pending
    rest = text[node.end :]
    for stop in range(1, min(len(rest), spell.longest) + 1):
        if not spell.starts(rest[:stop]):
            return False
        for token in spell.exact(rest[:stop]):
            if canon.valid_next(pending, token):
                return True
    if len(rest) < spell.longest:
        longer = spell.longer(rest)
        if len(longer) > 32:
            return bool(canon.mask(pending)[longer].any())
        return any(canon.valid_next(pending, t) for t in longer)
    return False


def reading(origins: list[tuple[Any, bytes]], text: bytes, spell: Spellings) -> list[Any]:
    """The contexts reading ``text`` byte by byte will ask for, in order (speculation).

    Unlike :func:`plan`, a context is kept as soon as its token is canonical: reading
    asks for it at that byte, whatever comes later. A candidate stops at the first
    byte no canonical token of it can spell.
    """
    out = []
    alive = [(lm_state, -len(partial), partial) for lm_state, partial in origins]
    for k in range(1, len(text) + 1):
        born = []
        kept = []
        for lm_state, start, partial in alive:
            spelled = partial + text[max(start, 0) : k]
            canon, pending = lm_state.canon, lm_state.pending
            ends = [t for t in spell.exact(spelled) if canon.valid_next(pending, t)]
            for t in ends:
                child = lm_state << t
                out.append(child)
                born.append((child, k, b""))
            longer = spell.longer(spelled)
            if len(longer) > 32:
                goes_on = bool(canon.mask(pending)[longer].any())
            else:
                goes_on = any(canon.valid_next(pending, t) for t in longer)
            if goes_on:
                kept.append((lm_state, start, partial))
        alive = kept + born
    return out


def walk(roots: list[Node]) -> list[Node]:
    """Every node below the roots (roots excluded), parents before children."""
    out, stack = [], list(reversed(roots))
    while stack:
        node = stack.pop()
        if node.parent is not None:
            out.append(node)
        stack.extend(reversed(node.children))
    return out

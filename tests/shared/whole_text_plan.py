"""The unwindowed plan of ``ExactByteState.prefill`` before issue 27: a test oracle.

Every context reading a whole text creates, as one forest, listed before any row is
asked for (what main did up to 14983da). ``tests/bytelm/test_exact_long_texts.py``
checks the windowed prefill (``genlm_bytelm.exact.prefill``) against it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from genlm_bytelm.exact.plan import Spellings, can_go_on, goes_on_longer


@dataclass(eq=False)
class Node:
    """A canonical context met while reading: it ends at ``end`` (an offset in the text)."""

    lm_state: Any
    end: int
    parent: Node | None = None
    token: int | None = None
    children: list[Node] = field(default_factory=list)
    alive: bool = True


def plan(origins: list[tuple[Any, bytes]], text: bytes, spell: Spellings) -> list[Node]:
    """The contexts reading ``text`` creates, as a forest rooted at ``(lm_state, partial)``."""
    roots = []
    by_end: dict[int, list[Node]] = {}
    for lm_state, partial in origins:
        node = Node(lm_state, -len(partial))
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
    canon = node.lm_state.canon
    start = max(node.end, 0)
    first = start if partial else start + 1  # a read partial token may end right here
    for stop in range(first, min(len(text), start + spell.longest) + 1):
        if not spell.starts(partial + text[start:stop]):
            break
        for token in spell.exact(partial + text[start:stop]):
            if not canon.valid_next(node.lm_state.pending, token):
                continue
            child = Node(node.lm_state << token, stop, parent=node, token=token)
            if stop == len(text) or can_go_on(canon, child.lm_state.pending, text[stop:], spell):
                node.children.append(child)
                by_end.setdefault(stop, []).append(child)


def _runs_past(node: Node, text: bytes, spell: Spellings) -> bool:
    rest = text[node.end :]
    state = node.lm_state
    return len(rest) < spell.longest and goes_on_longer(state.canon, state.pending, rest, spell)


def walk(roots: list[Node]) -> list[Node]:
    """Every node below the roots (roots excluded), parents before children."""
    out, stack = [], list(reversed(roots))
    while stack:
        node = stack.pop()
        if node.parent is not None:
            out.append(node)
        stack.extend(reversed(node.children))
    return out

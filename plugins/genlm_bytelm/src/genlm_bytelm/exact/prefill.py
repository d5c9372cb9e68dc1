"""``ExactByteState.prefill`` in windows: memory bounded by the window, not the text.

Each window's contexts are listed (with ``LOOKAHEAD_BYTES`` more to drop dead ones), asked
for in budgeted calls keeping only the row entries needed, then dropped; the result is
the unwindowed one (docs/bytes-design.md, *Long texts*).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from genlm_bytelm.exact.plan import Spellings, can_go_on, goes_on_longer

__all__ = ["LOOKAHEAD_BYTES", "WINDOW_BYTES", "PlanNode", "windowed_plan"]

#: Bytes whose contexts' rows are asked for at once.
WINDOW_BYTES = 256
#: Bytes read past a window to drop the contexts a later byte rules out.
LOOKAHEAD_BYTES = 256
#: Budget of one model call: bytes of rows returned, and token ids asked for.
CALL_ROW_BYTES = 32 * 2**20
CALL_TOKEN_IDS = 2 * 2**20
#: Whether a settled context reads on by the filter's ``settled_run`` (off: byte by byte).
SETTLED_RUNS = True
#: Next tokens checked one by one near the text's end (a mask needs tables it often lacks).
END_CHECKS = 8192


class PlanNode:
    """A canonical context met while reading, ending at offset ``end`` of the text.

    Its token ids are ``prefix + tail`` (``prefix`` shared); ``logp`` is set once its
    parent's row is read; roots have ``partial``, their current token's bytes; inside a
    settled run, away from the text's end, ``pending`` is None (never grown nor final).
    """

    __slots__ = (
        "alive",
        "children",
        "end",
        "logp",
        "parent",
        "partial",
        "pending",
        "prefix",
        "tail",
        "token",
    )

    def __init__(
        self,
        prefix: list[int],
        tail: tuple[int, ...],
        pending: Any,
        end: int,
        parent: PlanNode | None = None,
        token: int | None = None,
        partial: bytes | None = None,
    ) -> None:
        self.prefix = prefix
        self.tail = tail
        self.pending = pending
        self.end = end
        self.parent = parent
        self.token = token
        self.partial = partial
        self.children: list[PlanNode] = []
        self.alive = True
        self.logp = float("nan")

    @property
    def context(self) -> list[int]:
        """The token ids of the context (a new list)."""
        return [*self.prefix, *self.tail]

    @property
    def n_tokens(self) -> int:
        """How many token ids the context has."""
        return len(self.prefix) + len(self.tail)


async def windowed_plan(
    roots: list[PlanNode],
    text: bytes,
    spell: Spellings,
    canon: Any,
    fetch: Any,
    run: Any,
    window: int | None = None,
    lookahead: int | None = None,
) -> list[PlanNode]:
    """Read ``text`` from ``roots`` window by window; the nodes that end the reading.

    ``fetch(chain, nodes)`` returns, per node (by ``id``), its children's tokens'
    log-probabilities (``chain`` suits one prefix call); ``await run(fn)`` runs the planning
    off the event loop under the filter's lock. Returned: the nodes ending in the text's last
    ``spell.longest`` bytes that read it to its end, ``logp`` set.
    """
    window = WINDOW_BYTES if window is None else max(1, int(window))
    ahead = max(LOOKAHEAD_BYTES if lookahead is None else int(lookahead), spell.longest)
    plan = _Windows(roots, text, spell, canon, window, ahead)
    await run(plan.first)
    finals: list[PlanNode] = []
    while True:
        tops, nodes, chain = await run(plan.next_window)
        entries = await fetch(chain, [*tops, *nodes])
        for node in [*tops, *nodes]:  # parents first
            for child, value in zip(node.children, entries[id(node)], strict=True):
                child.logp = node.logp + value
        read = nodes if plan.start == 0 else [*tops, *nodes]  # the roots end elsewhere
        finals += [c for c in read if len(text) - spell.longest < c.end < len(text)]
        if not plan.advance():
            return finals


class _Windows:
    """The plan of one prefill, window by window (the filter's work: run it locked)."""

    def __init__(
        self,
        roots: list[PlanNode],
        text: bytes,
        spell: Spellings,
        canon: Any,
        window: int,
        ahead: int,
    ) -> None:
        self.roots, self.text, self.spell, self.canon = roots, text, spell, canon
        self.window, self.ahead = window, ahead
        self.runs = getattr(canon, "settled_run", None) if SETTLED_RUNS else None
        self.by_end: dict[int, list[PlanNode]] = {}
        self.grown_to = 0  # the nodes ending before this offset have their children
        self.start = 0
        self.stop = 0

    def first(self) -> None:
        for root in self.roots:
            self._grow(root, root.partial or b"")

    def next_window(self) -> tuple[list[PlanNode], list[PlanNode], list[PlanNode]]:
        """The window's first nodes, the others (parents first) and its longest chain."""
        n, start, by_end = len(self.text), self.start, self.by_end
        self.stop = stop = n + 1 if start + self.window >= n else start + self.window
        target = min(n, stop + self.ahead)
        for end in range(self.grown_to, target):
            for node in by_end.get(end, ()):
                self._grow(node, b"")
        self.grown_to = max(self.grown_to, target)
        self._prune()
        if start == 0:
            tops = list(self.roots)
            for root in self.roots:
                root.children = [c for c in root.children if c.alive]
        else:
            tops = [
                node
                for end in range(start, stop)
                for node in by_end.get(end, ())
                if node.alive and node.parent is None
            ]
        nodes = list(_walk(tops, stop))
        return tops, nodes, _deepest(tops, nodes)

    def advance(self) -> bool:
        """Drop the window read; False after the last."""
        if self.start == 0:
            for root in self.roots:
                root.children = []  # the tree below is let go window by window
        if self.stop > len(self.text):
            return False
        _rebase(self.by_end, self.stop)
        for end in range(self.start, self.stop):
            for node in self.by_end.pop(end, ()):
                # A node and its children refer to each other: unlinked, the window's
                # nodes (and the context lists they share) are freed now, not at the
                # collector's next full pass, which a long text outruns (garbage of
                # 250k-token contexts piling up, ~1 MiB of RSS a KB read).
                node.children, node.parent = [], None
        self.start = self.stop
        return True

    def _grow(self, node: PlanNode, partial: bytes) -> None:
        """Add ``node``'s children: canonical tokens ending inside the text that can go on."""
        text, spell, canon = self.text, self.spell, self.canon
        if node.children or (not partial and self.runs and self._run(node)):
            return  # a settled run's node, or one starting one
        start = max(node.end, 0)
        first = start if partial else start + 1  # a read partial token may end right here
        for stop in range(first, min(len(text), start + spell.longest) + 1):
            if not spell.starts(partial + text[start:stop]):
                break  # no token goes on with these bytes
            for token in spell.exact(partial + text[start:stop]):
                if not canon.valid_next(node.pending, token):
                    continue
                pending = canon.extend(node.pending, token)
                # all that can_go_on reads: no copy of the rest
                ahead = text[stop : stop + spell.longest]
                if stop == len(text) or can_go_on(canon, pending, ahead, spell, END_CHECKS):
                    child = PlanNode(
                        node.prefix, (*node.tail, token), pending, stop, parent=node, token=token
                    )
                    node.children.append(child)
                    self.by_end.setdefault(stop, []).append(child)

    def _run(self, node: PlanNode) -> bool:
        """Add the chain ``canon.settled_run`` offers after ``node`` (pendings near the end)."""
        n, canon = len(self.text), self.canon
        stop = min(n, node.end + self.window + self.ahead)
        run = self.runs(self.text, node.end, node.pending, stop) if stop > node.end else None
        tail = stop > n - self.spell.longest
        for k, token in enumerate(run[0] if run else ()):
            end = node.end + len(canon.byte_vocab[token])
            last = run[1] if k == len(run[0]) - 1 else None
            pending = canon.extend(node.pending, token) if tail else last
            child = PlanNode(node.prefix, (*node.tail, token), pending, end, node, token)
            node.children.append(child)
            self.by_end.setdefault(end, []).append(child)
            node = child
        return bool(run)

    def _prune(self) -> None:
        """Mark the nodes from the window's start on that cannot read on (those not grown may)."""
        n = len(self.text)
        for end in sorted((e for e in self.by_end if e >= self.start), reverse=True):
            if end >= self.grown_to and end < n:
                continue  # not grown yet: alive until known otherwise
            for node in self.by_end[end]:
                node.children = [c for c in node.children if c.alive]
                node.alive = end == n or bool(node.children) or self._runs_past(node)

    def _runs_past(self, node: PlanNode) -> bool:
        """Whether a canonical next token after ``node`` spells the rest of the text and more."""
        spell = self.spell
        rest = self.text[node.end : node.end + spell.longest]
        short = len(rest) < spell.longest
        return short and goes_on_longer(self.canon, node.pending, rest, spell, END_CHECKS)


def _walk(tops: list[PlanNode], stop: int) -> Iterator[PlanNode]:
    """The nodes below ``tops`` ending before ``stop``, parents first (depth first)."""
    stack = [c for top in reversed(tops) for c in reversed(top.children) if c.end < stop]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(c for c in reversed(node.children) if c.end < stop)


def _deepest(tops: list[PlanNode], nodes: list[PlanNode]) -> list[PlanNode]:
    """The longest chain of the window (most tokens), its top first."""
    depth = {id(t): 1 for t in tops}
    best = tops[0] if tops else None
    for node in nodes:  # parents come first
        depth[id(node)] = depth[id(node.parent)] + 1
        if depth[id(node)] > depth[id(best)]:
            best = node
    chain = []
    while best is not None and id(best) in depth:
        chain.append(best)
        best = best.parent
    return chain[::-1]


def _rebase(by_end: dict[int, list[PlanNode]], stop: int) -> None:
    """Let the nodes from ``stop`` on forget the earlier ones (their parents, prefixes)."""
    shared: dict[int, list[int]] = {}
    for end in sorted(e for e in by_end if e >= stop):
        for node in by_end[end]:
            parent = node.parent
            if parent is None:
                continue
            if parent.end < stop:
                prefix = shared.get(id(parent))
                if prefix is None:
                    prefix = shared[id(parent)] = parent.context
                node.prefix, node.tail, node.parent = prefix, (node.token,), None
            else:
                node.prefix, node.tail = parent.prefix, (*parent.tail, node.token)

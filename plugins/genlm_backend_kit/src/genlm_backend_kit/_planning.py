"""Planning forwards over prompts with cached prefixes: how to group, what to share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar


class PlannedInput(Protocol):
    """A prompt of a batch: its tokens and how many leading positions are cached."""

    @property
    def token_ids(self) -> tuple[int, ...]:
        """The whole prompt."""
        ...

    @property
    def past_len(self) -> int:
        """Leading positions whose keys/values are cached."""
        ...

    @property
    def n_new(self) -> int:
        """Positions the forward computes: ``len(token_ids) - past_len``."""
        ...


R = TypeVar("R", bound=PlannedInput)


def plan_groups(rows: Sequence[R], bytes_per_token: int, max_group_bytes: int) -> list[list[R]]:
    """Split rows into forwards that waste little on padding and fit in memory.

    Rows are sorted by (new tokens, past length), longest first, and packed greedily:
    a row joins the current group while the padded query slots stay within twice the
    real ones (plus 64 slots of slack, so one-token steps always share a forward) and
    the group's padded keys/values (``rows x (past + new) x bytes_per_token``) stay
    within ``max_group_bytes``. A row too big on its own still gets a group.
    """
    order = sorted(rows, key=lambda r: (r.n_new, r.past_len), reverse=True)
    groups: list[list[R]] = []
    group: list[R] = []
    width_new = width_past = real = 0
    for row in order:
        if group:
            b = len(group) + 1
            new_w = max(width_new, row.n_new)
            past_w = max(width_past, row.past_len)
            padded_ok = b * new_w <= 2 * (real + row.n_new) + 64
            memory_ok = b * (new_w + past_w) * bytes_per_token <= max_group_bytes
            if padded_ok and memory_ok:
                group.append(row)
                width_new, width_past, real = new_w, past_w, real + row.n_new
                continue
            groups.append(group)
        group = [row]
        width_new, width_past, real = row.n_new, row.past_len, row.n_new
    if group:
        groups.append(group)
    return groups


def shared_prefixes(rows: Sequence[PlannedInput], min_shared: int) -> list[tuple[int, ...]]:
    """Prefixes that several rows share beyond their cached pasts, worth computing once.

    In lexicographic order a row's longest common prefix with any other row is the one
    with a neighbour, so comparing neighbours finds them all. A prefix qualifies when it
    extends both neighbours' cached pasts by at least ``min_shared`` tokens. It may be a
    whole prompt (one prompt extending another): computing it first then answers that
    prompt too.
    """
    ordered = sorted(rows, key=lambda r: r.token_ids)
    found: set[tuple[int, ...]] = set()
    for a, b in zip(ordered, ordered[1:], strict=False):
        x, y = a.token_ids, b.token_ids
        n = min(len(x), len(y))
        m = 0
        while m < n and x[m] == y[m]:
            m += 1
        if m - max(a.past_len, b.past_len) >= min_shared:
            found.add(x[:m])
    return sorted(found)

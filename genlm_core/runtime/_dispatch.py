"""DispatchPolicy: when a batcher's pending batch is due, and which keys go in it.

No event loop and no thread, so each rule is tested by calling methods; the AutoBatcher
drives it. docs/architecture.md ("When a batch goes") says why the rules are these.
"""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from genlm_core.checks import is_int_at_least, is_seconds
from genlm_core.runtime._outcomes import BatcherStats

K = TypeVar("K", bound=Hashable)
PIPELINE_DEPTH = 2  # batches handed to the worker thread at once: one running, one queued
#: Default ``inline_below`` of a batcher with its own thread: about what handing a batch
#: to a thread and back costs here, so a batch run on the loop stalls it no longer.
INLINE_BELOW = 1e-4


class Added(enum.Enum):
    """What adding a request did, so the batcher knows whether to wake its worker."""

    SHARED = "joined a pending or in-flight computation of the same key"
    FIRST = "opened a new pending batch"
    FULL = "filled the pending batch"
    QUEUED = "joined the pending batch"


class Step(enum.Enum):
    """What the batcher's worker does next (see [`DispatchPolicy.next_step`][])."""

    SEND = "send the next batch to the worker thread now"
    HOLD = "wait until the pending batch is due, then send it"
    WAIT = "sleep until a request, a finished batch or close wakes it"
    STOP = "end: nothing is pending or in flight"


# Members as module constants: reading ``Added.QUEUED`` costs ~100 ns, a global ~10.
_SHARED, _FIRST, _FULL, _QUEUED = Added.SHARED, Added.FIRST, Added.FULL, Added.QUEUED


class DispatchPolicy(Generic[K]):
    """The pending keys of one batcher and the rules for sending them.

    A batch is due when it is full, when its first request has waited ``max_wait``
    seconds, or (``adaptive``) when a pass of the event loop added no key: callers
    scheduled together share a batch, and a lone caller never waits for company.

    Args:
        max_batch_size: Most keys in one batch.
        max_wait: Seconds the first request may wait; with ``adaptive`` only a cap
            (0 = no cap besides ``max_batch_size``).
        adaptive: Also due once a pass adds nothing (see [`due`][]).
        clock: Seconds, monotonic (the batcher passes its loop's ``time``).
        inline_below: Seconds: while batches are expected to take less, ``cheap`` is
            set and the batcher runs the next one on its event loop (0 = never).

    Raises ValueError (naming the value) for a bad ``max_batch_size`` or ``max_wait``.
    """

    def __init__(
        self,
        max_batch_size: int = 64,
        max_wait: float = 0.0,
        adaptive: bool = True,
        clock: Callable[[], float] = time.monotonic,
        inline_below: float = 0.0,
    ) -> None:
        if not is_int_at_least(max_batch_size, 1):
            raise ValueError(f"max_batch_size must be an integer >= 1, got {max_batch_size!r}")
        if not is_seconds(max_wait):
            raise ValueError(f"max_wait must be a finite number of seconds >= 0, got {max_wait!r}")
        if not is_seconds(inline_below):
            raise ValueError(
                f"inline_below must be a finite number of seconds >= 0, got {inline_below!r}"
            )
        self.max_batch_size = max_batch_size
        self.max_wait = float(max_wait)
        self.adaptive = bool(adaptive)
        self._clock = clock
        self.waiting: dict[K, list[Any]] = {}  # every key pending or in flight -> its waiters
        self.pending: list[K] = []  # keys not yet sent, in order of arrival
        self._first_at = 0.0  # when the pending batch's first key came (if _timed)
        self._timed = not (self.adaptive and self.max_wait == 0)  # a deadline counts
        self.stats = BatcherStats()
        self.inline_below = float(inline_below)
        self.cost = math.inf  # seconds the next batch is expected to take (see measured)
        self.cheap = False  # whether that is under inline_below

    def measured(self, seconds: float) -> None:
        """A batch took ``seconds``: a slower one counts at once, faster ones halve the cost.

        So one slow batch sends the next ones to the thread for a while, and a run of
        cheap ones brings them back to the loop. The first batch sets it.
        """
        cost = self.cost
        if seconds < cost and cost != math.inf:
            seconds = max(seconds, cost / 2)
        self.cost = seconds
        self.cheap = seconds < self.inline_below

    def add(self, key: K, waiter: Any) -> Added:
        """Record a caller of ``key`` (anything with ``done()``): share the key or queue it."""
        self.stats.requests += 1
        waiters = self.waiting.get(key)
        if waiters is not None:
            waiters.append(waiter)
            self.stats.deduplicated += 1
            return _SHARED
        self.waiting[key] = [waiter]
        pending = self.pending
        pending.append(key)
        n = len(pending)
        if n == 1:
            if self._timed:
                self._first_at = self._clock()
            return _FIRST
        return _FULL if n == self.max_batch_size else _QUEUED

    def deadline(self) -> float:
        """When the pending batch is due at the latest (``inf``: only by size or quiet)."""
        if not self._timed:
            return math.inf
        return self._first_at + self.max_wait

    def due(self, *, quiet: bool = False) -> bool:
        """Whether the pending batch should go now.

        ``quiet``: the last pass of the event loop added no key (counts only when
        ``adaptive``).
        """
        if len(self.pending) >= self.max_batch_size or (quiet and self.adaptive):
            return True
        return self._timed and self._clock() >= self.deadline()

    def next_step(self, in_flight: int, closed: bool, draining: bool) -> Step:
        """The worker's next step, given the batches in flight and whether it is closed.

        Closed, it sends nothing more unless ``draining`` (then the pending keys still
        go), and stops once nothing is in flight.
        """
        if closed and not (draining and self.pending):
            return Step.WAIT if in_flight else Step.STOP
        if in_flight:
            return Step.SEND if self.may_queue_behind(in_flight) else Step.WAIT
        return Step.HOLD if self.pending else Step.STOP

    def may_queue_behind(self, in_flight: int) -> bool:
        """Whether to send a batch while ``in_flight`` run: only a full one, one deep.

        A full batch cannot grow, so it waits in the worker's queue; a partial one keeps
        collecting until the worker is free.
        """
        return len(self.pending) >= self.max_batch_size and in_flight < PIPELINE_DEPTH

    def take_lone(self, waiter: Any) -> list[K]:
        """``take(settled=True)`` in fewer steps, for one key with ``waiter`` its only caller.

        Else ``[]``, and nothing is taken.
        """
        pending = self.pending
        if len(pending) != 1 or (futs := self.waiting[pending[0]])[0] is not waiter:
            return []
        if len(futs) != 1 or waiter.done():
            return []
        del self.waiting[pending[0]]
        self.pending = []
        self.stats.batches += 1
        self.stats.max_batch_seen = self.stats.max_batch_seen or 1
        return pending

    def take(self, *, settled: bool = False) -> tuple[list[K], list[list[Any]]]:
        """Pop the next batch: up to ``max_batch_size`` keys a caller still waits for.

        Keys whose callers all left are dropped, never computed. ``settled``: forget the
        keys now, as [`settle`][] would (for a batch run at once on the event loop,
        where no request can join a key before its callers are answered).
        """
        pending = self.pending
        if len(pending) <= self.max_batch_size:
            taken, self.pending = pending, []
        else:
            taken = pending[: self.max_batch_size]
            del pending[: self.max_batch_size]
        waiting = self.waiting
        keys: list[K] = []
        waiters: list[list[Any]] = []
        for key in taken:
            futs = waiting.pop(key) if settled else waiting[key]
            if futs[0].done() and all(fut.done() for fut in futs):  # (rare: all left)
                if not settled:
                    del waiting[key]
                continue
            keys.append(key)
            waiters.append(futs)
        if keys:
            self.stats.batches += 1
            self.stats.max_batch_seen = max(self.stats.max_batch_seen, len(keys))
        return keys, waiters

    def settle(self, keys: list[K], waiters: list[list[Any]], *, failed: bool = False) -> None:
        """Forget a finished batch's keys: a later request for one computes it again."""
        self.stats.errors += failed
        waiting = self.waiting
        for key, futs in zip(keys, waiters, strict=True):
            if waiting.get(key) is futs:  # not a newer entry made after a drop_all
                del waiting[key]

    def drop_pending(self) -> list[list[Any]]:
        """Forget the keys not yet sent; their waiters, for the batcher to fail."""
        pending, self.pending = self.pending, []
        return [self.waiting.pop(key) for key in pending]

    def drop_all(self) -> list[list[Any]]:
        """Forget every key, pending or in flight; their waiters, for the batcher to fail."""
        waiting, self.waiting, self.pending = self.waiting, {}, []
        return list(waiting.values())

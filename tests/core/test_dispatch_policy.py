"""DispatchPolicy: when a batch is due and what goes in it, with no event loop and no thread.

A fake clock and plain waiters (``done()`` only) stand in for the loop and its futures;
tests/core/test_batching.py checks the AutoBatcher follows these rules end to end.
"""

from __future__ import annotations

import asyncio
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from genlm_core.errors import BatcherClosedError
from genlm_core.runtime import BatcherStats, DispatchPolicy
from genlm_core.runtime._dispatch import PIPELINE_DEPTH, Added, Step
from genlm_core.runtime._outcomes import worker_exit_error


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Waiter:
    def __init__(self, done: bool = False) -> None:
        self.left = done

    def done(self) -> bool:
        return self.left


def policy(**kw: object) -> tuple[DispatchPolicy[str], Clock]:
    clock = Clock()
    return DispatchPolicy(clock=clock, **kw), clock  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, None])
def test_max_batch_size_is_validated_naming_the_value(bad: object) -> None:
    with pytest.raises(ValueError, match=rf"max_batch_size must be an integer >= 1, got {bad!r}"):
        DispatchPolicy(max_batch_size=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, "1"])
def test_max_wait_is_validated_naming_the_value(bad: object) -> None:
    with pytest.raises(ValueError, match="max_wait must be a finite number of seconds >= 0"):
        DispatchPolicy(max_wait=bad)  # type: ignore[arg-type]


def test_add_says_whether_it_opened_filled_joined_or_shared_a_batch() -> None:
    p, _ = policy(max_batch_size=3)
    assert p.add("a", Waiter()) is Added.FIRST
    assert p.add("b", Waiter()) is Added.QUEUED
    assert p.add("a", Waiter()) is Added.SHARED
    assert p.add("c", Waiter()) is Added.FULL
    assert p.pending == ["a", "b", "c"] and len(p.waiting["a"]) == 2
    assert p.stats == BatcherStats(requests=4, deduplicated=1)


def test_adaptive_is_due_once_a_pass_adds_nothing_and_never_waits_without_a_cap() -> None:
    p, clock = policy(max_batch_size=8)
    p.add("a", Waiter())
    assert not p.due()
    assert p.due(quiet=True)
    clock.now = 1e9
    assert not p.due() and p.deadline() == math.inf


def test_adaptive_with_max_wait_is_due_at_the_cap_counted_from_the_first_request() -> None:
    p, clock = policy(max_wait=0.5)
    clock.now = 10.0
    p.add("a", Waiter())
    clock.now = 10.4
    p.add("b", Waiter())  # a later request does not move the deadline: never a debounce
    assert p.deadline() == 10.5 and not p.due()
    clock.now = 10.5
    assert p.due()


def test_non_adaptive_ignores_quiet_passes_and_waits_for_the_deadline_or_a_full_batch() -> None:
    p, clock = policy(max_batch_size=2, max_wait=1.0, adaptive=False)
    p.add("a", Waiter())
    assert not p.due(quiet=True)
    clock.now = 1.0
    assert p.due()
    q, _ = policy(max_batch_size=2, max_wait=1.0, adaptive=False)
    q.add("a", Waiter())
    q.add("b", Waiter())
    assert q.due()


def test_non_adaptive_without_a_wait_is_due_at_once() -> None:
    p, _ = policy(adaptive=False)
    p.add("a", Waiter())
    assert p.due()


def test_take_splits_by_size_in_order_and_drops_keys_every_caller_left() -> None:
    p, _ = policy(max_batch_size=2)
    gone = Waiter(done=True)
    p.add("a", Waiter())
    p.add("b", gone)
    p.add("c", Waiter())
    p.add("d", Waiter())
    keys, waiters = p.take()
    assert keys == ["a"] and "b" not in p.waiting  # "b" is never computed
    assert p.pending == ["c", "d"]
    assert p.take()[0] == ["c", "d"] and p.pending == []
    assert p.stats.batches == 2 and p.stats.max_batch_seen == 2
    assert waiters[0] is p.waiting["a"]  # in flight: a new caller of "a" joins it


def test_take_settled_forgets_its_keys_at_once() -> None:
    p, _ = policy()
    p.add("a", Waiter())
    p.add("b", Waiter(done=True))
    assert p.take(settled=True)[0] == ["a"]
    assert p.waiting == {} and p.pending == []  # a new caller of "a" computes it again
    assert p.add("a", Waiter()) is Added.FIRST


def test_take_lone_takes_one_key_for_its_one_caller_and_nothing_else() -> None:
    p, _ = policy()
    own, other = Waiter(), Waiter()
    p.add("a", own)
    assert p.take_lone(other) == []  # not that caller's batch
    p.add("a", other)
    assert p.take_lone(own) == [] and p.pending == ["a"]  # two callers share the key
    p.take()
    p, _ = policy()
    p.add("a", own)
    p.add("b", other)
    assert p.take_lone(own) == [] and p.pending == ["a", "b"]  # two keys
    p, _ = policy()
    p.add("a", gone := Waiter(done=True))
    assert p.take_lone(gone) == []  # its caller left: take() drops it instead
    p, _ = policy()
    p.add("a", own)
    assert p.take_lone(own) == ["a"]
    assert p.waiting == {} and p.pending == []
    assert (p.stats.batches, p.stats.max_batch_seen) == (1, 1)


def test_a_key_in_flight_is_shared_until_settled_then_computed_again() -> None:
    p, _ = policy()
    p.add("a", Waiter())
    keys, waiters = p.take()
    assert p.add("a", Waiter()) is Added.SHARED and p.pending == []
    p.settle(keys, waiters, failed=True)
    assert p.add("a", Waiter()) is Added.FIRST
    assert p.stats.errors == 1


def test_settle_keeps_a_newer_entry_made_after_drop_all() -> None:
    p, _ = policy()
    p.add("a", Waiter())
    keys, waiters = p.take()
    assert p.drop_all() == [waiters[0]]
    p.add("a", Waiter())
    p.settle(keys, waiters)  # the old batch comes back after the worker was cancelled
    assert "a" in p.waiting and p.pending == ["a"]


def test_drop_pending_returns_the_queued_callers_and_keeps_those_in_flight() -> None:
    p, _ = policy()
    p.add("a", Waiter())
    p.take()
    w = Waiter()
    p.add("b", w)
    assert p.drop_pending() == [[w]]
    assert list(p.waiting) == ["a"] and p.pending == []


def test_only_a_full_batch_queues_behind_one_in_flight() -> None:
    p, _ = policy(max_batch_size=2)
    p.add("a", Waiter())
    assert not p.may_queue_behind(1)  # a partial batch keeps collecting
    p.add("b", Waiter())
    assert p.may_queue_behind(1)
    assert not p.may_queue_behind(PIPELINE_DEPTH)  # one running, one queued at most


@pytest.mark.parametrize(
    ("pending", "in_flight", "closed", "draining", "step"),
    [
        (0, 0, False, False, Step.STOP),  # idle: the worker ends, holding nothing
        (1, 0, False, False, Step.HOLD),
        (1, 1, False, False, Step.WAIT),  # partial batch while one runs
        (2, 1, False, False, Step.SEND),  # full batch behind the running one
        (2, 2, False, False, Step.WAIT),
        (1, 1, True, False, Step.WAIT),  # closed: wait for the in-flight batch only
        (0, 0, True, False, Step.STOP),
        (1, 0, True, True, Step.HOLD),  # draining: the pending keys still go
        (0, 1, True, True, Step.WAIT),
    ],
)
def test_next_step(pending: int, in_flight: int, closed: bool, draining: bool, step: Step) -> None:
    p, _ = policy(max_batch_size=2)
    for key in "ab"[:pending]:
        p.add(key, Waiter())
    assert p.next_step(in_flight, closed, draining) is step


@given(
    ops=st.lists(st.tuples(st.sampled_from("abcde"), st.booleans()), max_size=40),
    size=st.integers(1, 4),
)
def test_every_key_taken_once_at_most_a_batch_and_in_arrival_order(
    ops: list[tuple[str, bool]], size: int
) -> None:
    p, _ = policy(max_batch_size=size)
    sent: list[str] = []
    queued: list[str] = []  # keys that were not shared, in arrival order
    for key, take_now in ops:
        if p.add(key, Waiter()) is not Added.SHARED:
            queued.append(key)
        if take_now:
            keys, waiters = p.take()
            assert len(keys) <= size and len(set(keys)) == len(keys)
            sent += keys
            p.settle(keys, waiters)
    while p.pending:
        sent += p.take()[0]
    assert sent == queued
    assert p.stats.requests == len(ops)
    assert p.stats.deduplicated == len(ops) - len(queued)


# -- where the next batch runs (the event loop, or the thread) --------------------------


def test_cost_estimate_rises_at_once_and_falls_by_halves() -> None:
    p, _ = policy(inline_below=1e-4)
    assert p.cost == math.inf and not p.cheap  # unmeasured: the thread measures it
    p.measured(5e-5)
    assert p.cost == 5e-5 and p.cheap
    p.measured(8e-3)  # one slow batch: the next ones go to the thread
    assert p.cost == 8e-3 and not p.cheap
    costs = []
    for _ in range(7):
        p.measured(1e-6)
        costs.append(p.cost)
    assert costs == [8e-3 / 2**i for i in range(1, 8)]
    assert p.cheap and not any(c < 1e-4 for c in costs[:-1])  # cheap again at 62.5 us


def test_inline_below_zero_is_never_cheap() -> None:
    p, _ = policy()
    p.measured(0.0)
    assert p.inline_below == 0 and not p.cheap


@pytest.mark.parametrize("bad", [-1e-6, math.nan, math.inf, "1e-4", True])
def test_inline_below_is_validated(bad: object) -> None:
    with pytest.raises(ValueError, match=rf"inline_below must be .* >= 0, got {bad!r}"):
        DispatchPolicy(inline_below=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("exc", "leader", "loop_closed", "expected"),
    [
        (ValueError("bug"), False, False, ValueError),  # a bug fails them with itself
        (ValueError("bug"), True, True, ValueError),  # even from a leader, a closed loop
        (asyncio.CancelledError(), False, False, BatcherClosedError),
        (asyncio.CancelledError(), False, True, BatcherClosedError),
        (asyncio.CancelledError(), True, False, None),  # its successor task carries on
        (KeyboardInterrupt(), False, False, RuntimeError),
        (KeyboardInterrupt(), False, True, None),  # a closed loop's callers are gone
        (KeyboardInterrupt(), True, False, None),
    ],
)
def test_what_waiting_callers_get_when_the_worker_ends(exc, leader, loop_closed, expected):
    """The batcher's worker ending with ``exc``: the error every caller still waiting gets."""
    error = worker_exit_error(exc, "b", leader, loop_closed)
    if expected is None:
        assert error is None
    else:
        assert isinstance(error, expected)
        assert error is exc or "b's worker was" in str(error)

"""What a batch gives back: results checked, handed to each key's callers, per-key failures.

Also the batcher's counters, and what its callers get when its worker ends.
"""

from __future__ import annotations

import dataclasses
from asyncio import CancelledError, InvalidStateError
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from genlm_core.errors import BatcherClosedError, BatchSizeMismatchError


class RequestFailure:
    """What ``batch_fn`` returns for a key that failed on its own: its callers get ``error``.

    The other keys of the batch still get their results.
    """

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __repr__(self) -> str:
        return f"RequestFailure({self.error!r})"


@dataclasses.dataclass
class BatcherStats:
    """Counters of an [`AutoBatcher`][] since it was created.

    Attributes:
        requests: Keys submitted (each key of ``submit_many`` counts once).
        batches: Calls of ``batch_fn``.
        deduplicated: Requests that joined a pending or in-flight computation of the
            same key instead of adding one.
        max_batch_seen: Most keys passed to one ``batch_fn`` call.
        errors: ``batch_fn`` calls that raised (or returned the wrong number of results).
        inline_batches: Of ``batches``, those run on the event loop itself (see the
            batcher's ``inline_below``).
    """

    requests: int = 0
    batches: int = 0
    deduplicated: int = 0
    max_batch_seen: int = 0
    errors: int = 0
    inline_batches: int = 0


def failure_of(value: Any) -> BaseException | None:
    """The error of a [`RequestFailure`][] result, None for an ordinary result."""
    return value.error if type(value) is RequestFailure else None


def resolve(
    futures: list[Any], value: Any, error: BaseException | None, copy: Callable[[Any], Any] | None
) -> None:
    """Give every caller still waiting for one key its outcome.

    ``error`` fails them all; otherwise the first gets ``value`` and, with ``copy``, each
    other one ``copy(value)``. A copy that raises fails its own caller alone.
    """
    first = True
    for fut in futures:
        if fut.done():
            continue
        if error is not None:
            fut.set_exception(error)
        elif first or copy is None:
            fut.set_result(value)
            first = False
        else:
            try:
                mine = copy(value)
            except Exception as exc:  # noqa: BLE001 - this caller's failure, handed to it
                fut.set_exception(exc)
            else:
                fut.set_result(mine)


def fail_waiting(waiters: Iterable[list[Any]], error: BaseException) -> None:
    """Fail every future still waiting in ``waiters`` (lists of one key's futures)."""
    for futures in waiters:
        for fut in futures:
            if not fut.done():
                fut.set_exception(error)


def checked(results: Sequence[Any], n_keys: int, name: str) -> list[Any]:
    """``results`` as a list (a tensor splits into rows), if it holds one per key."""
    out = results if type(results) is list else list(results)
    if len(out) != n_keys:
        raise BatchSizeMismatchError(
            f"batch_fn returned {len(out)} results for {n_keys} keys; it must "
            f"return exactly one result per key, in the order of the keys ({name})"
        )
    return out


def deliver(
    waiters: list[list[Any]],
    results: list[Any] | None,
    exc: BaseException | None,
    copy: Callable[[Any], Any] | None,
    name: str,
) -> None:
    """Give every caller of a finished batch its result or the batch's error.

    A KeyboardInterrupt or SystemExit from the thread reaches callers as a RuntimeError;
    if resolving itself is interrupted, the callers left are failed before it propagates.
    """
    if exc is not None and not isinstance(exc, Exception):
        err = RuntimeError(f"{name}: batch_fn was interrupted by {exc!r}")
        err.__cause__ = exc
        exc = err
    try:
        if exc is not None:
            for futs in waiters:
                resolve(futs, None, exc, copy)
            return
        for futs, value in zip(waiters, results, strict=True):  # type: ignore[arg-type]
            if len(futs) == 1 and type(value) is not RequestFailure:
                try:  # (the common case, with the fewest calls)
                    futs[0].set_result(value)
                except InvalidStateError:  # its caller left
                    pass
                continue
            resolve(futs, value, failure_of(value), copy)
    except BaseException as failure:
        fail_waiting(waiters, failure)
        raise


def abandon(futures: Iterable[Any]) -> None:
    """Cancel futures a caller gave up on, errors marked retrieved (not once the loop closed)."""
    for fut in futures:
        if fut.get_loop().is_closed():
            return
        if not fut.cancel() and not fut.cancelled():
            fut.exception()  # no "exception never retrieved" log


def worker_exit_error(
    exc: BaseException, name: str, leader: bool, loop_closed: bool
) -> BaseException | None:
    """The error every caller still waiting gets when a batcher's worker ends with ``exc``.

    None when they need none: a leading caller's successor task carries its work on, and
    a closed loop's callers are gone. Otherwise none may hang: a cancelled worker (its
    loop shutting down?) closes the batcher, a bug fails them with itself, an interrupt
    with a RuntimeError.
    """
    if isinstance(exc, Exception):
        return exc
    if leader or (loop_closed and not isinstance(exc, CancelledError)):
        return None
    if isinstance(exc, CancelledError):
        return BatcherClosedError(f"{name}'s worker was cancelled (is its loop shutting down?)")
    return RuntimeError(f"{name}'s worker was interrupted by {exc!r}; not computed")

"""ComputeGate: when a model's computations may run, and who may change the model meanwhile.

See docs/architecture.md ("The gate").
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator


class ComputeGate:
    """Admits computations one at a time (or together) and exclusive changes alone.

    ``concurrent`` (a thread-safe backend) lets computations overlap; they still never
    overlap an exclusive section.
    """

    def __init__(self, concurrent: bool = False) -> None:
        self.concurrent = bool(concurrent)
        self._cond = threading.Condition(threading.Lock())
        self._computing: dict[int, int] = {}  # thread id -> nesting depth
        self._owner: int | None = None  # thread holding exclusive access
        self._owner_depth = 0
        self._waiting_exclusive = 0  # writers waiting: new computations hold back
        self._closed_error: Callable[[], BaseException] | None = None  # set by close()

    @property
    def closed(self) -> bool:
        """Whether [`close`][] was called."""
        return self._closed_error is not None

    def close(self, error: Callable[[], BaseException]) -> None:
        """Refuse every later computation with ``error()``; wait for those running.

        One nested in a running computation is part of it and still runs. Idempotent
        (the first ``error`` stays).
        """
        with self.exclusive(), self._cond:
            if self._closed_error is None:
                self._closed_error = error

    @contextlib.contextmanager
    def computing(self) -> Iterator[None]:
        """Hold while computing with the model.

        Raises:
            Exception: ``error()`` of [`close`][], once the gate is closed.
        """
        me = threading.get_ident()
        with self._cond:
            if me not in self._computing:  # a new computation, not a nested one
                if self._owner != me:
                    while not self._may_compute():
                        self._cond.wait()
                if self._closed_error is not None:
                    raise self._closed_error()
            self._computing[me] = self._computing.get(me, 0) + 1
        try:
            yield
        finally:
            with self._cond:
                depth = self._computing.pop(me) - 1
                if depth:
                    self._computing[me] = depth
                else:
                    self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold while changing the model: waits for running computations, admits none."""
        me = threading.get_ident()
        with self._cond:
            if self._owner != me:
                # A computation asking for exclusive access waits here, so it does not count
                # as running (else two of a thread-safe backend would wait for each other).
                suspended = self._computing.pop(me, 0)
                if suspended:
                    self._cond.notify_all()
                self._waiting_exclusive += 1
                try:
                    while self._owner is not None or self._computing:
                        self._cond.wait()
                finally:
                    self._waiting_exclusive -= 1
                    if suspended:
                        self._computing[me] = suspended
                self._owner = me
            self._owner_depth += 1
        try:
            yield
        finally:
            with self._cond:
                self._owner_depth -= 1
                if not self._owner_depth:
                    self._owner = None
                    self._cond.notify_all()

    def _may_compute(self) -> bool:
        if self._owner is not None or self._waiting_exclusive:
            return False
        return self.concurrent or not self._computing

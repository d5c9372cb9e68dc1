"""``Chart``: a dict with a default value and the arithmetic of distributions (genlm-bytes').

``compare`` needs pandas, which genlm-core does not depend on: it is imported only there.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any

from genlm_bytelm.display import format_table

__all__ = ["Chart"]


class Chart(dict):
    """A dictionary whose missing keys read as ``zero``: ``Chart(zero, vals=())``.

    ``zero`` is ``0`` for probabilities, ``-inf`` for log-probabilities.
    """

    def __init__(self, zero: Any, vals: Any = ()) -> None:
        self.zero = zero
        super().__init__(vals)

    def __missing__(self, k: Hashable) -> Any:
        return self.zero

    def spawn(self) -> Chart:
        """An empty chart with the same ``zero``."""
        return Chart(self.zero)

    def __add__(self, other: dict) -> Chart:
        new = self.spawn()
        for k, v in self.items():
            new[k] += v
        for k, v in other.items():
            new[k] += v
        return new

    def __mul__(self, other: dict) -> Chart:
        new = self.spawn()
        for k in self:
            v = self[k] * other[k]
            if v == self.zero:
                continue
            new[k] += v
        return new

    def copy(self) -> Chart:
        """A shallow copy."""
        return Chart(self.zero, self)

    def trim(self) -> Chart:
        """Without the entries equal to ``zero``."""
        return Chart(self.zero, {k: v for k, v in self.items() if v != self.zero})

    def metric(self, other: Chart) -> Any:
        """Largest absolute difference over the keys of both charts."""
        if not isinstance(other, Chart):
            raise TypeError(f"metric compares two Charts, got {type(other).__name__}")
        return max((abs(self[x] - other[x]) for x in self.keys() | other.keys()), default=0)

    def _repr_html_(self) -> str:
        table = format_table(self.trim().items(), headings=["key", "value"])
        return f'<div style="font-family: Monospace;">{table}</div>'

    def __repr__(self) -> str:
        return repr({k: v for k, v in self.items() if v != self.zero})

    def __str__(self, style_value: Callable[[Any, Any], str] = lambda k, v: str(v)) -> str:
        lines = (
            f"  {k!r}: {style_value(k, self[k])},"
            for k in sorted(self, key=lambda k: -self[k])
            if self[k] != self.zero
        )
        return "Chart {\n" + "\n".join(lines) + "\n}"

    def assert_equal(
        self,
        want: Any,
        *,
        domain: Iterable[Hashable] | None = None,
        tol: float = 1e-5,
        verbose: bool = False,
        throw: bool = True,
    ) -> None:
        """Assert every key of ``domain`` (default: both charts' keys) is within ``tol``."""
        if not isinstance(want, Chart):
            want = Chart(self.zero, want)
        if domain is None:
            domain = self.keys() | want.keys()
        if not (verbose or throw):
            raise ValueError("assert_equal with verbose=False and throw=False does nothing")
        errors = []
        for x in domain:
            ok = abs(self[x] - want[x]) <= tol
            if verbose:
                print("✔" if ok else "✘", x, self[x], *([] if ok else [want[x]]))
            if not ok:
                errors.append(x)
        if throw and errors:
            x = errors[0]
            raise AssertionError(f"{x}: {self[x]} {want[x]}")

    def argmax(self) -> Hashable:
        """The key of the largest value (the first one on ties)."""
        return max(self, key=self.__getitem__)

    def argmin(self) -> Hashable:
        """The key of the smallest value (the first one on ties)."""
        return min(self, key=self.__getitem__)

    def top(self, k: int) -> Chart:
        """The ``k`` largest entries, largest first."""
        keys = sorted(self, key=self.__getitem__, reverse=True)[:k]
        return Chart(self.zero, {key: self[key] for key in keys})

    def max(self) -> Any:
        """The largest value."""
        return max(self.values())

    def min(self) -> Any:
        """The smallest value."""
        return min(self.values())

    def sum(self) -> Any:
        """The sum of the values."""
        return sum(self.values())

    def sort(self, **kwargs: Any) -> Chart:
        """Entries in order of their keys (``sorted``'s keyword arguments apply)."""
        return Chart(self.zero, [(k, self[k]) for k in sorted(self, **kwargs)])

    def sort_descending(self) -> Chart:
        """Entries by decreasing value."""
        return Chart(self.zero, [(k, self[k]) for k in sorted(self, key=lambda k: -self[k])])

    def normalize(self) -> Chart:
        """Values divided by their sum (unchanged if the sum is 0)."""
        total = self.sum()
        if total == 0:
            return self
        return Chart(self.zero, [(k, v / total) for k, v in self.items()])

    def filter(self, f: Callable[[Hashable], bool]) -> Chart:
        """The entries whose key satisfies ``f``."""
        return Chart(self.zero, [(k, v) for k, v in self.items() if f(k)])

    def map_values(self, f: Callable[[Any], Any]) -> Chart:
        """``f`` applied to every value (and to ``zero``)."""
        return Chart(f(self.zero), [(k, f(v)) for k, v in self.items()])

    def map_keys(self, f: Callable[[Hashable], Hashable]) -> Chart:
        """``f`` applied to every key (later entries win on collisions)."""
        return Chart(self.zero, [(f(k), v) for k, v in self.items()])

    def project(self, f: Callable[[Hashable], Hashable]) -> Chart:
        """``f`` applied to every key, summing the values of keys that collide."""
        out = self.spawn()
        for k, v in self.items():
            out[f(k)] += v
        return out

    def compare(self, other: Any, *, domain: Iterable[Hashable] | None = None) -> Any:
        """A pandas DataFrame of ``key, self, other, metric`` per key (needs pandas)."""
        try:
            import pandas as pd
        except ImportError as exc:
            raise ImportError("Chart.compare needs pandas: pip install pandas") from exc
        if not isinstance(other, Chart):
            other = Chart(self.zero, other)
        if domain is None:
            domain = self.keys() | other.keys()
        rows = [
            {"key": x, "self": self[x], "other": other[x], "metric": abs(self[x] - other[x])}
            for x in domain
        ]
        return pd.DataFrame(rows)

    def to_dict(self) -> dict:
        """A plain dict of the entries."""
        return dict(self.items())

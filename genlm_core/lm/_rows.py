"""How a model's batches are computed: adapters made current, rows checked, cached, copied.

[`RowComputation`][] sits between the batcher and the backend's ``compute_batch``;
on a GPU its checks and copies are batched (docs/architecture.md, "Rows").
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch

from genlm_core.errors import BackendContractError, BatchSizeMismatchError
from genlm_core.lm._adapters import short_ids
from genlm_core.lm._backend import Backend
from genlm_core.lm._requests import PrefixRequest, Request
from genlm_core.runtime import RequestFailure
from genlm_core.runtime._row_pool import row_maximum

if TYPE_CHECKING:
    from genlm_core.lm._adapters import LoraAdapters
    from genlm_core.runtime import ComputeGate, HeapTrimmer, OutputCache, RowPool, StackPool

Key = Request | PrefixRequest


class RowComputation:
    """The batch function of a [`BatchedAsyncLM`][genlm_core.lm.BatchedAsyncLM], and its counts.

    Handed everything it uses: the backend that computes rows, the gate it computes
    under, the adapters it makes current, the output cache and row pool it fills, the
    rows' device and width, and the heap trimmer (None: no trimming).
    """

    def __init__(
        self,
        backend: Backend,
        *,
        gate: ComputeGate,
        adapters: LoraAdapters,
        cache: OutputCache | None,
        row_pool: RowPool,
        stacks: StackPool,
        row_device: torch.device,
        width: int,
        trimmer: HeapTrimmer | None,
    ) -> None:
        self._backend = backend  # its methods are looked up per batch: a patch holds
        self._name = type(backend).__name__
        self._gate = gate
        self._adapters = adapters
        self._cache = cache
        self._row_pool = row_pool
        self._stacks = stacks  # a prefix call's rows, stacked into recycled memory
        self._row_device = row_device
        self._trimmer = trimmer
        self.width = width  # the rows' length
        self._counts = [0, 0]  # compute_batch calls, requests they computed
        self._uncached: set[Key] = set()  # see uncached()
        self._counts_lock = threading.Lock()  # the worker and sync callers count

    def counts(self, reset: bool = False) -> tuple[int, int]:
        """``compute_batch`` calls and the requests they computed (then zero them if ``reset``)."""
        with self._counts_lock:
            counts = (self._counts[0], self._counts[1])
            if reset:
                self._counts[:] = [0, 0]
        return counts

    @contextlib.contextmanager
    def uncached(self, keys: list[Key]) -> Iterator[None]:
        """Meanwhile, rows computed for ``keys`` are not stored in the output cache."""
        self._uncached.update(keys)
        try:
            yield
        finally:
            self._uncached.difference_update(keys)

    def run(self, keys: list[Key], *, for_callers: bool = False) -> list[Any]:
        """The batcher's function: next-token and prefix requests, checked and cached.

        Under the model's gate. A request whose adapter was replaced is computed with
        the current version; one whose adapter was removed, or whose row the backend got
        wrong, gets a [`RequestFailure`][] of its own. With ``for_callers`` (the
        batcher), each result is a tensor nobody else holds, copied here off the loop.
        """
        with self._gate.computing():
            current = [self._adapters.current(key) for key in keys]
            todo = list(dict.fromkeys(k for k in current if type(k) is not RequestFailure))
            requests = [k for k in todo if type(k) is not PrefixRequest]
            prefix_requests = [k for k in todo if type(k) is PrefixRequest]
            results: dict[Any, Any] = {}
            if requests:
                results.update(zip(requests, self._next_token_rows(requests), strict=True))
            if prefix_requests:
                results.update(self._prefix_rows(prefix_requests))
        if self._trimmer is not None:
            self._trimmer.maybe_trim()
        out = [k if type(k) is RequestFailure else results[k] for k in current]
        if for_callers:
            handed: set[int] = set()
            copies: list[int] = []
            for i, (key, value) in enumerate(zip(current, out, strict=True)):
                if type(value) is RequestFailure:
                    continue
                if type(key) is not PrefixRequest or id(value) in handed:
                    copies.append(i)  # a cached row, or one already handed out
                handed.add(id(value))
            for i, row in zip(copies, _private_or_failures([out[i] for i in copies]), strict=True):
                out[i] = row
        return out

    def _outputs(self, outs: Sequence[Any], requests: list[Any], method: str) -> list[Any]:
        """The backend's ``outs`` for ``requests``: one per request, else an error."""
        outs = list(outs)
        if len(outs) != len(requests):
            raise BatchSizeMismatchError(
                f"{self._name}.{method} returned {len(outs)} results for {len(requests)} requests"
            )
        return outs

    def _next_token_rows(self, requests: list[Request]) -> list[Any]:
        """The backend's rows for ``requests``, checked, and stored in the output cache."""
        outs = self._outputs(self._backend.compute_batch(requests), requests, "compute_batch")
        with self._counts_lock:
            self._counts[0] += 1
            self._counts[1] += len(requests)
        rows = self.checked_rows(requests, outs, "compute_batch")
        cache, uncached = self._cache, self._uncached
        if cache is not None:
            for req, row in zip(requests, rows, strict=True):
                if type(row) is not RequestFailure and req not in uncached:
                    cache[req] = row
        return rows

    def _prefix_rows(self, requests: list[PrefixRequest]) -> dict[PrefixRequest, Any]:
        computed = self._backend.compute_prefix_batch(requests)
        outs = self._outputs(computed, requests, "compute_prefix_batch")
        results: dict[PrefixRequest, Any] = {}
        # Every row of every sequence is checked at once (one host read-back on a GPU).
        # The prefixes' keys are made only to store rows or to name a bad one: each
        # copies its part of the ids (a long context's prefixes: rows x context).
        spans: list[tuple[PrefixRequest, int, int]] = []
        values: list[Any] = []
        for req, out in zip(requests, outs, strict=True):
            rows = list(out)
            if len(rows) != (expected := len(req.token_ids) - req.start):
                results[req] = RequestFailure(
                    BackendContractError(
                        f"{self._name}.compute_prefix_batch returned {len(rows)} "
                        f"rows for a sequence of {len(req.token_ids)} tokens from position "
                        f"{req.start}; expected {expected}, one per prefix"
                    )
                )
                continue
            spans.append((req, len(values), expected))
            values.extend(rows)
        cache = self._cache
        all_checked = self.checked_rows(_Prefixes(spans), values, "compute_prefix_batch")
        for req, first, n in spans:
            checked = all_checked[first : first + n]
            failed = [row for row in checked if type(row) is RequestFailure]
            if failed:
                results[req] = failed[0]
                continue
            if cache is not None and req not in self._uncached:
                for prefix, row in zip(req.prefixes(), checked, strict=True):
                    cache[prefix] = row
            results[req] = self._stacks.stack(checked)
        return results

    def checked_rows(self, reqs: Sequence[Request], outs: list[Any], method: str) -> list[Any]:
        """Each of ``outs`` if it is a valid row for its request (owned), else a failure.

        Valid: float32, shape ``(len(byte_vocab),)``, on [`row_device`][], largest
        entry finite and <= 1e-3 (log-probs, not logits; no NaN).
        """
        width = self.width
        device = self._row_device
        checked: list[Any] = [None] * len(outs)
        todo: list[int] = []
        for i, out in enumerate(outs):
            if not isinstance(out, torch.Tensor):
                problem = f"a {type(out).__name__}"
            elif out.dtype != torch.float32:
                problem = f"a {str(out.dtype).removeprefix('torch.')} tensor"
            elif out.device != device:
                problem = f"a tensor on {out.device}"
            elif out.shape != (width,):
                problem = f"a tensor of shape {tuple(out.shape)}"
            else:
                todo.append(i)
                continue
            checked[i] = self._contract_failure(reqs[i], method, problem)
        if not todo:
            return checked
        tops = _row_maxima([outs[i] for i in todo], self._row_pool)
        good: list[int] = []
        for i, top in zip(todo, tops, strict=True):
            if top != top:  # NaN if any entry is NaN
                problem = "a row with NaN"
            elif top == math.inf:
                problem = "a row with +inf"
            elif top > 1e-3:
                problem = f"a row whose largest entry is {top:.4g} > 0 (logits, not log-probs?)"
            else:
                good.append(i)
                continue
            checked[i] = self._contract_failure(reqs[i], method, problem)
        for i, row in zip(good, self._owned_rows([outs[i] for i in good]), strict=True):
            checked[i] = row
        return checked

    def _contract_failure(self, req: Request, method: str, problem: str) -> RequestFailure:
        width = self.width
        device = self._row_device
        where = "CPU" if device.type == "cpu" else str(device)
        return RequestFailure(
            BackendContractError(
                f"{self._name}.{method} returned {problem} for the request "
                f"token_ids={short_ids(req.token_ids)}, lora_name={req.lora_name!r}; expected "
                f"a float32 {where} tensor of shape ({width},) holding normalised log-probs"
            )
        )

    def _owned_rows(self, rows: list[torch.Tensor]) -> list[torch.Tensor]:
        """``rows``, each copied if it is a view (it would pin its whole batch in the cache).

        Pooled rows are whole and not asked for their storage (one object fewer per row).
        """
        views = [
            i
            for i, row in enumerate(rows)
            if not self._row_pool.owns(row) and row.untyped_storage().nbytes() > row.nbytes
        ]
        if not views:
            return rows
        out = list(rows)
        for i, row in zip(views, private_rows([rows[i] for i in views]), strict=True):
            out[i] = row
        return out


def _row_maxima(rows: list[torch.Tensor], pool: RowPool) -> list[float]:
    """The largest entry of each row (NaN where a row has one).

    CPU rows: as ``pool`` noted it while the backend wrote the row, else read now
    (`row_maximum`); device ones: [`batched_row_maxima`][].
    """
    if rows[0].device.type == "cpu":
        noted = pool.take_maxima(rows)
        return [
            row_maximum(row) if top is None else top for row, top in zip(rows, noted, strict=True)
        ]
    return batched_row_maxima(rows)


#: Most bytes of device rows stacked at once by [`batched_row_maxima`][].
CHECK_CHUNK_BYTES = 64 << 20


def batched_row_maxima(rows: list[torch.Tensor]) -> list[float]:
    """`_row_maxima`'s device path: stacked in chunks of [`CHECK_CHUNK_BYTES`][]."""
    per = max(1, CHECK_CHUNK_BYTES // max(1, rows[0].nbytes))
    maxima = [torch.stack(rows[lo : lo + per]).amax(dim=1) for lo in range(0, len(rows), per)]
    return torch.cat(maxima).tolist()


def private(row: torch.Tensor) -> torch.Tensor:
    """A copy of a shared row (cached, or computed for several callers) for one caller.

    Callers mask rows in place; a copy is ~10-20 us for a 50k vocabulary.
    """
    return torch.empty_like(row).copy_(row)


def private_rows(rows: list[torch.Tensor]) -> list[torch.Tensor]:
    """[`private`][] of each row; on a GPU one multi-tensor copy instead of one per row."""
    if not rows:
        return []
    if rows[0].device.type == "cpu" or len(rows) == 1:
        return [private(row) for row in rows]
    copies = [torch.empty_like(row) for row in rows]
    torch._foreach_copy_(copies, rows)
    return copies


def _private_or_failures(rows: list[torch.Tensor]) -> list[Any]:
    """[`private_rows`][]; where a copy fails (memory pressure), that row's failure alone."""
    try:
        return private_rows(rows)
    except Exception:  # noqa: BLE001 - retried one by one: only the failing row fails
        out: list[Any] = []
        for row in rows:
            try:
                out.append(private(row))
            except Exception as exc:  # noqa: BLE001 - handed to that request's callers
                out.append(RequestFailure(exc))
        return out


def raise_failures(results: list[Any]) -> list[Any]:
    """Batch results for a sync caller: raise the first [`RequestFailure`][]'s error."""
    for result in results:
        if type(result) is RequestFailure:
            raise result.error
    return results


class _Prefixes(Sequence[Request]):
    """The prefixes of several prefix requests as one list, each made when read."""

    def __init__(self, spans: list[tuple[PrefixRequest, int, int]]) -> None:
        self._spans = spans

    def __len__(self) -> int:
        return sum(n for _, _, n in self._spans)

    def __getitem__(self, i: int) -> Request:  # type: ignore[override]
        for req, first, n in self._spans:
            if first <= i < first + n:
                return req.prefixes()[i - first]
        raise IndexError(i)

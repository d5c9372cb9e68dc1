"""How a model's batches are computed: adapters made current, rows checked, cached, copied.

:class:`RowComputation` is the part of :class:`~genlm_core.lm.BatchedAsyncLM` between
the batcher and the backend's ``compute_batch``/``compute_prefix_batch``: it runs one
computation at a time, brings requests of a replaced adapter to its current version
(and fails those of a removed one alone), checks each row the backend returns, stores
it in the output cache and gives each caller a copy of its own.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from genlm_core.errors import BackendContractError, BatchSizeMismatchError, UnknownLoraError
from genlm_core.lm._requests import PrefixRequest, Request
from genlm_core.runtime import RequestFailure

__all__ = ["RowComputation", "private", "raise_failures", "short_ids"]


class RowComputation:
    """The batch function of :class:`~genlm_core.lm.BatchedAsyncLM` (a mixin)."""

    byte_vocab: list[Any]
    cache: Any
    row_pool: Any
    trims_heap: bool
    heap_trimmer: Any
    _gate: Any
    _adapters: Any
    _batch_counts: list[int]
    _batch_counts_lock: Any
    compute_batch: Any
    compute_prefix_batch: Any

    def _batch_fn(self, keys: list[Any], *, for_callers: bool = False) -> list[Any]:
        """The batcher's function: next-token and prefix requests, checked and cached.

        Runs one computation at a time (the model's :class:`ComputeGate`). A request
        whose adapter was replaced since it was made is computed with the current
        version; one whose adapter was removed, or whose row the backend got wrong,
        gets a :class:`RequestFailure` of its own.

        With ``for_callers`` (the batcher's calls), each key's result is a tensor nobody
        else holds (cached rows are copied here, in the worker thread, not on the
        event loop): the batcher hands it to the key's first caller as it is.
        """
        with self._gate.computing():
            current = [self._current(key) for key in keys]
            todo = list(dict.fromkeys(k for k in current if type(k) is not RequestFailure))
            requests = [k for k in todo if type(k) is not PrefixRequest]
            prefix_requests = [k for k in todo if type(k) is PrefixRequest]
            results: dict[Any, Any] = {}
            if requests:
                results.update(zip(requests, self._next_token_rows(requests), strict=True))
            if prefix_requests:
                results.update(self._prefix_rows(prefix_requests))
        if self.trims_heap:
            self.heap_trimmer.maybe_trim()
        out = [k if type(k) is RequestFailure else results[k] for k in current]
        if for_callers:
            handed: set[int] = set()
            for i, (key, value) in enumerate(zip(current, out, strict=True)):
                if type(value) is RequestFailure:
                    continue
                if type(key) is not PrefixRequest or id(value) in handed:
                    out[i] = private(value)  # a cached row, or one already handed out
                handed.add(id(value))
        return out

    def _current(self, key: Any) -> Any:
        """``key`` for the adapter version loaded now, or a failure if it was removed."""
        name = key.lora_name
        if name is None:
            return key
        generation = self._adapters.generation(name)
        if generation == key.generation:
            return key
        if generation is None:
            return RequestFailure(
                UnknownLoraError(
                    f"LoRA adapter {name!r} was removed while this request waited "
                    f"(token_ids={short_ids(key.token_ids)}); add it again with "
                    f"lm.add_new_lora(path, {name!r}), or use another adapter"
                )
            )
        if type(key) is PrefixRequest:
            return dataclasses.replace(key, generation=generation)
        return key._replace(generation=generation)

    def _next_token_rows(self, requests: list[Request]) -> list[Any]:
        outs = list(self.compute_batch(requests))
        if len(outs) != len(requests):
            raise BatchSizeMismatchError(
                f"{type(self).__name__}.compute_batch returned {len(outs)} results "
                f"for {len(requests)} requests"
            )
        with self._batch_counts_lock:
            self._batch_counts[0] += 1
            self._batch_counts[1] += len(requests)
        rows = [
            self._checked(req, out, "compute_batch")
            for req, out in zip(requests, outs, strict=True)
        ]
        if self.cache is not None:
            for req, row in zip(requests, rows, strict=True):
                if type(row) is not RequestFailure:
                    self.cache[req] = row
        return rows

    def _prefix_rows(self, requests: list[PrefixRequest]) -> dict[PrefixRequest, Any]:
        outs = list(self.compute_prefix_batch(requests))
        if len(outs) != len(requests):
            raise BatchSizeMismatchError(
                f"{type(self).__name__}.compute_prefix_batch returned {len(outs)} results "
                f"for {len(requests)} requests"
            )
        results: dict[PrefixRequest, Any] = {}
        for req, out in zip(requests, outs, strict=True):
            rows = list(out)
            prefixes = req.prefixes()
            if len(rows) != len(prefixes):
                results[req] = RequestFailure(
                    BackendContractError(
                        f"{type(self).__name__}.compute_prefix_batch returned {len(rows)} "
                        f"rows for a sequence of {len(req.token_ids)} tokens from position "
                        f"{req.start}; expected {len(prefixes)}, one per prefix"
                    )
                )
                continue
            checked = [
                self._checked(prefix, row, "compute_prefix_batch")
                for prefix, row in zip(prefixes, rows, strict=True)
            ]
            failed = [row for row in checked if type(row) is RequestFailure]
            if failed:
                results[req] = failed[0]
                continue
            if self.cache is not None:
                for prefix, row in zip(prefixes, checked, strict=True):
                    self.cache[prefix] = row
            results[req] = torch.stack(checked)
        return results

    def _checked(self, req: Request, out: Any, method: str) -> Any:
        """``out`` if it is a valid row for ``req`` (copied if a view), else a failure.

        One reduction over the row: cheap against the forward that made it.
        """
        width = len(self.byte_vocab)
        if not isinstance(out, torch.Tensor):
            problem = f"a {type(out).__name__}"
        elif out.dtype != torch.float32:
            problem = f"a {str(out.dtype).removeprefix('torch.')} tensor"
        elif out.device.type != "cpu":
            problem = f"a tensor on {out.device}"
        elif out.shape != (width,):
            problem = f"a tensor of shape {tuple(out.shape)}"
        else:
            top = out.max().item()  # NaN if any entry is NaN
            if top != top:
                problem = "a row with NaN"
            elif top == math.inf:
                problem = "a row with +inf"
            elif top > 1e-3:
                problem = f"a row whose largest entry is {top:.4g} > 0 (logits, not log-probs?)"
            else:
                return self._owned(out)
        return RequestFailure(
            BackendContractError(
                f"{type(self).__name__}.{method} returned {problem} for the request "
                f"token_ids={short_ids(req.token_ids)}, lora_name={req.lora_name!r}; expected "
                f"a float32 CPU tensor of shape ({width},) holding normalised log-probs"
            )
        )

    def _owned(self, out: torch.Tensor) -> torch.Tensor:
        """``out``, copied if it is a view (it would pin its whole batch in the cache).

        Rows of the pool are whole: asking for their storage would keep one more Python
        object per cached row alive, for the garbage collector to scan.
        """
        if not self.row_pool.owns(out) and out.untyped_storage().nbytes() > out.nbytes:
            return out.clone()
        return out


def private(row: torch.Tensor) -> torch.Tensor:
    """A copy of a shared row (cached, or computed for several callers) for one caller.

    Callers mask rows in place; a copy is ~10-20 us for a 50k vocabulary, against
    milliseconds for the forward that computed the row. Made in the worker thread for
    a computed row's first caller, on the event loop for cache hits and the others.
    """
    return torch.empty_like(row).copy_(row)


def raise_failures(results: list[Any]) -> list[Any]:
    """Batch results for a sync caller: raise the first :class:`RequestFailure`'s error."""
    for result in results:
        if type(result) is RequestFailure:
            raise result.error
    return results


def short_ids(token_ids: tuple[int, ...]) -> str:
    """``token_ids`` for a message: whole when short, else its ends."""
    if len(token_ids) <= 12:
        return repr(token_ids)
    head, tail = ", ".join(map(str, token_ids[:5])), ", ".join(map(str, token_ids[-5:]))
    return f"({head}, ..., {tail}) [{len(token_ids)} tokens]"

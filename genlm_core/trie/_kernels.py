"""numba kernels: token weights -> the mass of every trie node.

A row is filled in three branch-light passes over a :class:`~genlm_core.trie._build.MassPlan`,
in a compact float64 scratch array holding one value per *source* (leaf or branch
node):

1. leaves: ``scratch[token_src[t]] = ws[t]``;
2. branch nodes (inner nodes without exactly one child), children first: the sum
   (or max) of their children's sources;
3. every node, sequentially: ``out[v] = scratch[node_src[v]]`` (a chain of
   single-child nodes shares its bottom node's mass), rounded once if ``out`` is
   float32.

This avoids the serial dependency of walking single-child chains one link at a
time, which dominates a naive post-order pass, and keeps the random accesses in
the small scratch array while the large output is written front to back.

The kernels are exact in the sense that matters here: a node's mass is the sum (or
max) of its children's masses, accumulated in float64, never derived by
subtracting prefix sums, so a mass of 1e-30 next to 1.0 survives. Sums add the
children in ascending node order starting from 0.0, the order genlm-backend's
sequential kernel uses, so float64 inputs give bitwise identical sums. The max
starts from -inf, so log-space (all negative) weights are handled correctly.

Every kernel returns -1, or the first vocabulary position whose weight is NaN
(per row for the batch kernels).

The kernels release the GIL; batches are spread over cores by calling the batch
kernels on slices of rows from a thread pool (see :mod:`genlm_core.trie.cpu`).
A ``prange`` over rows was measured about 2x slower per row than these plain
loops (numba's parallel pipeline compiles the inner loops less well).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import numba
import numpy as np

if TYPE_CHECKING:
    from genlm_core.trie._build import MassPlan

__all__ = ["batch_max", "batch_sum", "fill_batch", "fill_one", "single_max", "single_sum"]


@numba.njit(cache=True, nogil=True)
def _fill_sum(
    token_src, branch, branch_ptr, branch_src, node_src, ws, scratch, out
):  # pragma: no cover - compiled
    for t in range(token_src.shape[0]):
        w = np.float64(ws[t])
        if w != w:
            return t
        scratch[token_src[t]] = w
    for i in range(branch.shape[0]):
        x = 0.0
        for j in range(branch_ptr[i], branch_ptr[i + 1]):
            x += scratch[branch_src[j]]
        scratch[branch[i]] = x
    for v in range(node_src.shape[0]):
        out[v] = scratch[node_src[v]]
    return -1


@numba.njit(cache=True, nogil=True)
def _fill_max(
    token_src, branch, branch_ptr, branch_src, node_src, ws, scratch, out
):  # pragma: no cover - compiled
    for t in range(token_src.shape[0]):
        w = np.float64(ws[t])
        if w != w:
            return t
        scratch[token_src[t]] = w
    for i in range(branch.shape[0]):
        x = -np.inf
        for j in range(branch_ptr[i], branch_ptr[i + 1]):
            y = scratch[branch_src[j]]
            if y > x:
                x = y
        scratch[branch[i]] = x
    for v in range(node_src.shape[0]):
        out[v] = scratch[node_src[v]]
    return -1


@numba.njit(cache=True, nogil=True)
def single_sum(
    token_src, branch, branch_ptr, branch_src, node_src, num_sources, ws, out
):  # pragma: no cover - compiled
    """Sum masses of one distribution ``ws`` (V,) into ``out`` (N,)."""
    scratch = np.empty(num_sources, np.float64)
    return _fill_sum(token_src, branch, branch_ptr, branch_src, node_src, ws, scratch, out)


@numba.njit(cache=True, nogil=True)
def single_max(
    token_src, branch, branch_ptr, branch_src, node_src, num_sources, ws, out
):  # pragma: no cover - compiled
    """Max masses of one distribution ``ws`` (V,) into ``out`` (N,)."""
    scratch = np.empty(num_sources, np.float64)
    return _fill_max(token_src, branch, branch_ptr, branch_src, node_src, ws, scratch, out)


@numba.njit(cache=True, nogil=True)
def batch_sum(
    token_src, branch, branch_ptr, branch_src, node_src, num_sources, ws, out
):  # pragma: no cover - compiled
    """Sum masses of each row of ``ws`` (B, V) into ``out`` (B, N)."""
    bad = np.full(ws.shape[0], -1, np.int64)
    scratch = np.empty(num_sources, np.float64)
    for b in range(ws.shape[0]):
        bad[b] = _fill_sum(
            token_src, branch, branch_ptr, branch_src, node_src, ws[b], scratch, out[b]
        )
    return bad


@numba.njit(cache=True, nogil=True)
def batch_max(
    token_src, branch, branch_ptr, branch_src, node_src, num_sources, ws, out
):  # pragma: no cover - compiled
    """Max masses of each row of ``ws`` (B, V) into ``out`` (B, N)."""
    bad = np.full(ws.shape[0], -1, np.int64)
    scratch = np.empty(num_sources, np.float64)
    for b in range(ws.shape[0]):
        bad[b] = _fill_max(
            token_src, branch, branch_ptr, branch_src, node_src, ws[b], scratch, out[b]
        )
    return bad


_POOL: ThreadPoolExecutor | None = None
_POOL_PID = 0
_POOL_LOCK = threading.Lock()


def _num_threads() -> int:
    """Threads for a batch: numba's setting (``NUMBA_NUM_THREADS``, default: all cores)."""
    return max(1, numba.config.NUMBA_NUM_THREADS)


def _pool() -> ThreadPoolExecutor:
    """One process-wide pool; the kernels release the GIL, so rows run in parallel."""
    global _POOL, _POOL_PID
    with _POOL_LOCK:
        if _POOL is None or _POOL_PID != os.getpid():  # a forked child has no pool threads
            _POOL = ThreadPoolExecutor(_num_threads(), thread_name_prefix="genlm-trie")
            _POOL_PID = os.getpid()
        return _POOL


def _plan_args(plan: MassPlan) -> tuple[object, ...]:
    return (
        plan.token_src,
        plan.branch,
        plan.branch_ptr,
        plan.branch_src,
        plan.node_src,
        plan.num_sources,
    )


def fill_one(
    plan: MassPlan, op: str, ws: np.ndarray, out_dtype: type = np.float64
) -> tuple[np.ndarray, int]:
    """Masses of one distribution ``ws`` (V,): ``(masses (N,), first NaN or -1)``."""
    out = np.empty(plan.node_src.shape[0], dtype=out_dtype)
    kernel = single_sum if op == "sum" else single_max
    return out, int(kernel(*_plan_args(plan), ws, out))


def fill_batch(
    plan: MassPlan,
    op: str,
    ws: np.ndarray,
    out_dtype: type = np.float64,
    out: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Masses of every row of ``ws`` (B, V), rows spread over the thread pool.

    Args:
        plan: The trie's mass plan.
        op: ``"sum"`` or ``"max"``.
        ws: The weights, one row per distribution.
        out_dtype: Dtype of the masses.
        out: Where to write them, a C-contiguous ``(B, N)`` array of ``out_dtype``
            (recycled memory, see :mod:`genlm_core.trie._outputs`); a new one if None.

    Returns:
        ``(masses (B, N) of out_dtype, bad (B,))``, ``bad[b]`` the first NaN of row
        ``b`` or -1.
    """
    if out is None:
        out = np.empty((ws.shape[0], plan.node_src.shape[0]), dtype=out_dtype)
    kernel = batch_sum if op == "sum" else batch_max
    args = _plan_args(plan)
    n = min(ws.shape[0], _num_threads())
    if n <= 1:
        return out, kernel(*args, ws, out)
    bounds = np.linspace(0, ws.shape[0], n + 1).astype(int).tolist()
    jobs = [
        _pool().submit(kernel, *args, ws[lo:hi], out[lo:hi])
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)
    ]
    return out, np.concatenate([job.result() for job in jobs])

"""numba kernels: token weights -> the mass of every trie node.

A row is filled over a `MassPlan` in three passes
(leaves, branch nodes children first, then every node from its source), in float64,
never subtracting; see docs/tries.md for why and for the measurements. Each kernel
returns the first vocabulary position whose weight is NaN (per row), or -1.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import numba
import numpy as np

if TYPE_CHECKING:
    from genlm_trie_numba._build import MassPlan


@numba.njit(cache=True, nogil=True)
def _fill_row(
    token_src, branch, branch_ptr, branch_src, node_src, is_max, ws, scratch, out
):  # pragma: no cover - compiled
    for t in range(token_src.shape[0]):
        w = np.float64(ws[t])
        if w != w:
            return t
        scratch[token_src[t]] = w
    if is_max:  # from -inf, so log-space weights are right
        for i in range(branch.shape[0]):
            x = -np.inf
            for j in range(branch_ptr[i], branch_ptr[i + 1]):
                y = scratch[branch_src[j]]
                if y > x:
                    x = y
            scratch[branch[i]] = x
    else:  # from 0.0 in ascending node order: genlm-backend's sums, bit for bit
        for i in range(branch.shape[0]):
            x = 0.0
            for j in range(branch_ptr[i], branch_ptr[i + 1]):
                x += scratch[branch_src[j]]
            scratch[branch[i]] = x
    for v in range(node_src.shape[0]):
        out[v] = scratch[node_src[v]]
    return -1


@numba.njit(cache=True, nogil=True)
def fill(
    token_src, branch, branch_ptr, branch_src, node_src, num_sources, is_max, ws, out
):  # pragma: no cover - compiled
    """Sum (or max) masses of each row of ``ws`` (B, V) into ``out`` (B, N); first NaNs (B,)."""
    bad = np.full(ws.shape[0], -1, np.int64)
    scratch = np.empty(num_sources, np.float64)
    for b in range(ws.shape[0]):
        bad[b] = _fill_row(
            token_src, branch, branch_ptr, branch_src, node_src, is_max, ws[b], scratch, out[b]
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


def fill_batch(
    plan: MassPlan,
    op: str,
    ws: np.ndarray,
    out_dtype: type = np.float64,
    out: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Masses of every row of ``ws`` (B, V), rows spread over the thread pool.

    ``op`` is ``"sum"`` or ``"max"``; ``out`` a C-contiguous ``(B, N)`` array of
    ``out_dtype`` to write into (a new one if None). Returns ``(masses, bad)``,
    ``bad[b]`` the first NaN position of row ``b`` or -1.
    """
    if out is None:
        out = np.empty((ws.shape[0], plan.node_src.shape[0]), dtype=out_dtype)
    args = (
        plan.token_src,
        plan.branch,
        plan.branch_ptr,
        plan.branch_src,
        plan.node_src,
        plan.num_sources,
        op == "max",
    )
    n = min(ws.shape[0], _num_threads())
    if n <= 1:
        return out, fill(*args, ws, out)
    bounds = np.linspace(0, ws.shape[0], n + 1).astype(int).tolist()
    jobs = [
        _pool().submit(fill, *args, ws[lo:hi], out[lo:hi])
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)
    ]
    return out, np.concatenate([job.result() for job in jobs])

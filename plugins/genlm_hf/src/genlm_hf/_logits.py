"""The output head's projection and the log-softmax of a forward, into reused memory.

On a CPU the logits are the largest tensors of a forward; they are projected in
blocks of vocabulary columns (shared with a helper thread) into a reused workspace,
and their log-softmax is written straight into pooled rows (see
[`RowPool`][genlm_core.runtime.RowPool]).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from genlm_core.runtime import RowPool
from genlm_hf._linear import ROW_BUCKETS, onednn_linears, onednn_pays, onednn_product
from genlm_hf._workspace import Workspace

__all__ = ["MIN_SPLIT_ROWS", "linears", "log_softmax_rows", "logits_into"]


#: Fewest rows a batch needs before its log-softmax is shared with the helper thread
#: (below, the hand-off costs more than the second thread saves).
MIN_SPLIT_ROWS = 8
#: Rows per log-softmax task when shared.
LOG_SOFTMAX_CHUNK_ROWS = 8
#: Target size of one projection task's output block (rows x vocabulary columns):
#: about what a core's L2 keeps while the block is written.
PROJECTION_BLOCK_BYTES = 512 << 10


def _share_work(helper: concurrent.futures.Executor | None, tasks: Sequence[Any]) -> None:
    """Run ``tasks`` (zero-argument callables) in this thread and ``helper`` at once.

    Both threads take the next task when they finish one (torch releases the GIL in
    kernels), so a helper that starts late (its core busy with another thread)
    takes fewer tasks instead of delaying the end; measured on the tiny GPT-2's
    projection with the helper 2 ms late: 3.9 ms against 5.4 ms for fixed halves.
    Without a helper, or with one task, everything runs here.
    """
    if helper is None or len(tasks) < 2:
        for task in tasks:
            task()
        return
    queue = iter(tasks)  # a list iterator: safe to share between threads

    def drain() -> None:
        for task in queue:
            task()

    job = helper.submit(drain)
    try:
        drain()
    finally:
        job.result()


@torch.no_grad()  # also in the helper thread: grad mode is per thread
def _linear_columns(
    hidden: torch.Tensor,
    out: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    start: int,
    stop: int,
    onednn: bool,
) -> None:
    """``out[:, start:stop] = hidden @ weight[start:stop].T (+ bias)``.

    With ``onednn``, the block is computed by oneDNN (see `genlm_hf._linear`)
    into a small fresh tensor, still in cache when it is copied into ``out``.
    """
    block = out[:, start:stop]
    part_bias = None if bias is None else bias[start:stop]
    if onednn:
        block.copy_(onednn_product(hidden, weight[start:stop], part_bias))
        return
    torch.mm(hidden, weight[start:stop].t(), out=block)
    if part_bias is not None:
        block.add_(part_bias)


def _project_into(
    helper: concurrent.futures.Executor | None,
    hidden: torch.Tensor,
    out: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    onednn: bool = False,
) -> None:
    """``out = hidden @ weight.T (+ bias)``, by blocks of vocabulary columns.

    Blocks whose output fits in L2 are faster than one call even in one thread
    (64 x 50k tiny-GPT-2 logits with torch's BLAS: 5.7 ms against 8.2), and they are
    the tasks shared with ``helper``.
    """
    rows = hidden.reshape(-1, hidden.shape[-1])
    flat = out.view(-1, out.shape[-1])
    vocab = weight.shape[0]
    # Decided for the whole head, not per block (a block of 2 rows would not pay alone).
    onednn = onednn and rows.dtype == torch.float32 and onednn_pays(*rows.shape, vocab)
    if onednn:  # one block width, so that oneDNN sees few shapes (see ROW_BUCKETS)
        width = PROJECTION_BLOCK_BYTES // (out.element_size() * ROW_BUCKETS[-1])
    else:
        width = max(1024, PROJECTION_BLOCK_BYTES // (out.element_size() * max(1, rows.shape[0])))
    _share_work(
        helper,
        [
            functools.partial(
                _linear_columns, rows, flat, weight, bias, start, start + width, onednn
            )
            for start in range(0, vocab, width)
        ],
    )


@contextlib.contextmanager
def logits_into(
    model: Any,
    workspace: Workspace | None,
    helper: concurrent.futures.Executor | None = None,
    onednn: bool = False,
) -> Iterator[None]:
    """During a forward, make a plain linear output head write into ``workspace``.

    Why: on a CPU the logits are the largest tensor of a forward (64 rows x 50k
    vocabulary = 13 MB), and a fresh one per batch is fresh pages from the allocator
    (first-touch page faults: the projection measured 9-12 ms instead of 6.6 ms for
    the tiny GPT-2). Only the allocation changes: the head computes what
    ``nn.Linear`` computes, and whatever the model does to the logits afterwards
    (soft-capping, scaling) still happens. Heads that are not exactly ``nn.Linear``
    (a LoRA-wrapped head, quantized layers) or carry hooks, accelerators (whose
    caching allocator already reuses memory), and forwards with autograd on are left
    alone.

    With a ``helper`` (a one-thread executor whose thread runs torch single-threaded),
    the projection's column blocks are shared between it and the calling thread: two
    cores without a second OpenMP team (see `genlm_hf._threads`). With
    ``onednn``, the blocks are computed by oneDNN (see `genlm_hf._linear`).
    """
    head = model.get_output_embeddings() if workspace is not None else None
    if (
        torch.is_grad_enabled()
        or type(head) is not torch.nn.Linear
        or head.weight.device.type != "cpu"
        or head._forward_hooks
        or head._forward_pre_hooks
        or "forward" in vars(head)
    ):
        yield
        return
    weight, bias = head.weight, head.bias

    def project(hidden: torch.Tensor) -> torch.Tensor:
        out = workspace.get((*hidden.shape[:-1], weight.shape[0]), weight.dtype, weight.device)
        _project_into(helper, hidden, out, weight, bias, onednn)
        return out

    head.forward = project
    try:
        yield
    finally:
        del head.forward


def linears(model: Any, onednn: bool) -> contextlib.AbstractContextManager[Any]:
    """The model's linear layers through oneDNN during the block, if ``onednn``.

    Entered after [`logits_into`][], which has then replaced the head's forward
    already, so the head is left to it.
    """
    return onednn_linears(model) if onednn else contextlib.nullcontext()


@torch.no_grad()
def log_softmax_rows(
    logits: torch.Tensor,
    workspace: Workspace | None = None,
    helper: concurrent.futures.Executor | None = None,
    pool: RowPool | None = None,
) -> list[torch.Tensor]:
    """Row-wise float32 log-softmax of ``(B, vocab)`` logits, as ``B`` CPU tensors.

    Every result owns its storage: the byte-bounded output cache then holds what it
    counts, and a caller keeping one row does not keep the whole batch alive.

    * CPU logits and a ``pool``: each row's log-softmax is written straight into a
      recycled row of the pool (no copy, no first-touch page faults), in blocks of
      rows shared with ``helper`` (see `_share_work`); the pool notes each row's
      maximum while it is hot, for the model's row check.
    * Otherwise: one batched kernel (into ``workspace``'s buffer when given), one
      device-to-host transfer, then one numpy copy per row (a single-threaded memcpy:
      a torch ``clone`` of a vocabulary-sized row is an OpenMP region, and while the
      caller's thread also runs torch, libgomp makes each region pay a thread
      wake-up).
    """
    if pool is not None and logits.device.type == "cpu" and logits.shape[1] == pool.width:
        rows = pool.empty_rows(logits.shape[0])
        _by_row_blocks(helper, functools.partial(_log_softmax_each, pool), logits, rows)
        return rows
    if workspace is not None:
        lp = workspace.get(tuple(logits.shape), torch.float32, logits.device)
        _by_row_blocks(helper, _log_softmax_into, logits, lp)
    else:
        lp = torch.log_softmax(logits, dim=-1, dtype=torch.float32)
    lp = lp.cpu().numpy()
    if pool is not None:
        return pool.copy_rows(lp)
    return [torch.from_numpy(row.copy()) for row in lp]


def _by_row_blocks(
    helper: concurrent.futures.Executor | None, fn: Any, logits: torch.Tensor, out: Any
) -> None:
    """``fn(logits block, out block)`` over blocks of rows, shared with ``helper``."""
    n = logits.shape[0]
    step = n if n < MIN_SPLIT_ROWS else LOG_SOFTMAX_CHUNK_ROWS
    tasks = [
        functools.partial(fn, logits[i : i + step], out[i : i + step]) for i in range(0, n, step)
    ]
    _share_work(helper, tasks)


@torch.no_grad()
def _log_softmax_into(logits: torch.Tensor, out: torch.Tensor) -> None:
    torch.log_softmax(logits, dim=-1, dtype=torch.float32, out=out)


@torch.no_grad()
def _log_softmax_each(pool: RowPool, logits: torch.Tensor, rows: Sequence[torch.Tensor]) -> None:
    """Each row's log-softmax, its maximum noted for the row check while it is hot."""
    for row_logits, out in zip(logits, rows, strict=True):
        torch.log_softmax(row_logits, dim=-1, dtype=torch.float32, out=out)
        pool.note_maximum(out)

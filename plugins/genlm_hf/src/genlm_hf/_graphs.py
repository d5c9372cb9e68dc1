"""A sampler's decode step, captured once per shape bucket and replayed (issue 42, point 2).

On a GPU the host sets the pace of a small step: transformers' Python per layer and a
few dozen kernel launches per layer. A CUDA graph records the launches of one forward
once and replays them with one call. It needs fixed shapes and fixed memory, which
the in-place forward (`genlm_hf._in_place`) makes possible: a decode step (one new
token per row) is a few index tensors over the pool. So per bucket of batch size and
key width, [`DecodeGraphs`][] keeps static input buffers (token ids, positions, write
slots, the rows' slot tables and lengths, all views of one tensor, filled by one
host-to-device copy), rows beyond the batch padded onto the dummy slot, and the
captured forward, whose logits it hands out.

A graph holds the pool's address and strides: when the pool moves or changes shape
(it grows by doubling on a GPU), every graph is dropped and captured again.
Multi-token rows keep the eager path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

from genlm_hf._forward import ForwardInput, KVLayout
from genlm_hf.kvcache import SlotRun, slots_of

__all__ = ["BATCH_BUCKETS", "DecodeGraphs", "cuda_capture", "eager_capture"]

#: Batch sizes a graph is captured for; a batch takes the smallest that holds it.
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
#: Smallest key width (slots a row may attend to) a graph is captured for; wider
#: batches take the next power of two.
MIN_KV_WIDTH = 256

#: ``capture(step) -> replay``: ``replay()`` runs ``step`` again and returns its output.
Capture = Callable[[Callable[[], torch.Tensor]], Callable[[], torch.Tensor]]


def cuda_capture(step: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
    """Capture ``step`` as a CUDA graph (after two warm-up runs on a side stream)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # lazy initialisation (cuBLAS handles, Triton's compile) first
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=_graph_pool()):
        out = step()

    def replay() -> torch.Tensor:
        graph.replay()
        return out

    replay.graph = graph  # type: ignore[attr-defined]  # kept alive with its replay
    return replay


def eager_capture(step: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
    """No graph: ``replay`` runs ``step`` (a CPU's stand-in, to test everything around it)."""
    return step


_POOL: list[Any] = []


def _graph_pool() -> Any:
    """One memory pool for every graph of the process (their steps never overlap)."""
    if not _POOL:
        _POOL.append(torch.cuda.graph_pool_handle())
    return _POOL[0]


@dataclasses.dataclass
class _Graph:
    """One captured shape: its static inputs and how to replay it."""

    flat: torch.Tensor  # every input, one device tensor
    staging: torch.Tensor  # its host twin (pinned on CUDA), filled then copied once
    replay: Callable[[], torch.Tensor]
    pool_key: tuple[int, tuple[int, ...]]  # the pool's address and shape when captured
    copied: Any = None  # the last host-to-device copy's CUDA event


class DecodeGraphs:
    """Captured decode steps of one model over one prefix cache's pool, per shape bucket.

    Args:
        model: The transformers model (its attention switched to the pool's).
        layout: Its K/V layout.
        capture: How a step is captured ([`cuda_capture`][], or [`eager_capture`][]).
        max_batch: Largest batch a graph is captured for (the model's ``batch_size``).
    """

    def __init__(self, model: Any, layout: KVLayout, *, capture: Capture, max_batch: int) -> None:
        self._model = model
        self._layout = layout
        self._capture = capture
        self._buckets = [b for b in BATCH_BUCKETS if b < max_batch] + [max_batch]
        self._graphs: dict[tuple[int, int], _Graph] = {}
        self.captures = 0  # graphs captured so far (a test reads it)

    def run(
        self,
        rows: Sequence[ForwardInput],
        reserved: Sequence[Sequence[SlotRun]],
        pool: torch.Tensor,
        dummy: int,
    ) -> torch.Tensor | None:
        """The rows' logits ``(B, vocab)`` by replaying a graph, or None (eager path then).

        None when a row has more than one new token or the batch is over ``max_batch``.
        The logits are the graph's own buffer: read them before the next replay.
        """
        if any(row.n_new != 1 for row in rows) or len(rows) > self._buckets[-1]:
            return None
        bucket = next(b for b in self._buckets if b >= len(rows))
        longest = max(row.past_len for row in rows) + 1
        width = max(MIN_KV_WIDTH, 1 << (longest - 1).bit_length())
        graph = self._graphs.get((bucket, width))
        if graph is not None and graph.pool_key != _pool_key(pool):
            self._graphs.clear()  # the pool moved or grew: every graph reads the old one
            graph = None
        if graph is None:
            graph = self._graphs[(bucket, width)] = self._make(bucket, width, pool, dummy)
        self._fill(graph, rows, reserved, bucket, width, dummy)
        return graph.replay()[: len(rows)]

    def clear(self) -> None:
        """Drop every graph (the model changed: an adapter, or the pool was freed)."""
        self._graphs.clear()

    def _make(self, bucket: int, width: int, pool: torch.Tensor, dummy: int) -> _Graph:
        from genlm_hf import _pool_attention as attention  # imports transformers

        device = self._layout.device
        size = bucket * (4 + width)  # ids, positions, write slots, lengths, slot tables
        flat = torch.empty(size, dtype=torch.long, device=device)
        staging = torch.empty(size, dtype=torch.long, pin_memory=device.type == "cuda")
        ids, positions, writes, lens, tables = _views(flat, bucket, width)
        ids.zero_(), positions.zero_(), lens.fill_(1)
        writes.fill_(dummy), tables.fill_(dummy)
        batch = attention.PoolBatch(
            write_slots=writes, kv_slots=tables, kv_lens=lens[:, 0], positions=positions,
            past_width=width - 1,
        )  # fmt: skip
        model, cache_arg = self._model, self._layout.cache_arg
        keep = {"logits_to_keep": 1}

        def step() -> torch.Tensor:
            with torch.no_grad(), attention.pool_attention_on(model):
                out = model(
                    ids, position_ids=positions, use_cache=True, pool_batch=batch,
                    **{cache_arg: attention.PoolCache(pool, batch)}, **keep,
                )  # fmt: skip
            return out.logits[:, -1]

        replay = self._capture(step)
        self.captures += 1
        return _Graph(flat, staging, replay, _pool_key(pool))

    def _fill(
        self,
        graph: _Graph,
        rows: Sequence[ForwardInput],
        reserved: Sequence[Sequence[SlotRun]],
        bucket: int,
        width: int,
        dummy: int,
    ) -> None:
        """Write this batch's inputs into the graph's buffers: one host-to-device copy.

        Filled through a NumPy view of the host buffer: element writes to a tensor cost
        microseconds each, a few per row on the host's critical path.
        """
        if graph.copied is not None:  # the host buffer may still be read by the last copy
            graph.copied.synchronize()
        ids, positions, writes, lens, tables = (
            v.numpy() for v in _views(graph.staging, bucket, width)
        )
        n = len(rows)
        ids[n:], positions[n:], lens[n:], writes[n:] = 0, 0, 1, dummy
        tables.fill(dummy)
        ids[:n, 0] = [row.token_ids[-1] for row in rows]
        positions[:n, 0] = past_lens = [row.past_len for row in rows]
        lens[:n, 0] = [p + 1 for p in past_lens]
        writes[:n, 0] = new = [runs[0][0] for runs in reserved]  # one new token: one slot
        for i, (row, write) in enumerate(zip(rows, new, strict=True)):
            tables[i, : row.past_len + 1] = [*slots_of(row.segments), write]
        graph.flat.copy_(graph.staging, non_blocking=True)
        if graph.flat.device.type == "cuda":  # the next _fill waits for this copy
            graph.copied = torch.cuda.Event()
            graph.copied.record()


def _views(flat: torch.Tensor, bucket: int, width: int) -> tuple[torch.Tensor, ...]:
    """``flat``'s views: ids, positions, write slots, lengths ``(bucket, 1)``; tables."""
    small = flat[: 4 * bucket].view(4, bucket, 1)
    tables = flat[4 * bucket :].view(bucket, width)
    return small[0], small[1], small[2], small[3], tables


def _pool_key(pool: torch.Tensor) -> tuple[int, tuple[int, ...]]:
    """What a graph baked in of the pool: its address and shape (its strides follow)."""
    return pool.data_ptr(), tuple(pool.shape)

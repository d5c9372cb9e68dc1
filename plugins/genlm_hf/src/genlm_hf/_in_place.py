"""Forwards that read and write the prefix cache's pool in place (``kv_reads="in_place"``).

The default forward (`genlm_hf._forward.run_group`) gathers every row's past out of
the slot pool into one padded buffer, and copies the new positions back after. Here
each row's new positions get pool slots first (``PrefixKVCache.reserve``), the model
writes its keys and values there and reads every row's through index arrays
(`genlm_hf._pool_attention`), and the slots become the new prefix nodes
(``PrefixKVCache.keep``): no gather, no store.

This is the layout a GPU's decode kernel and CUDA graph need (issue 42). On a CPU its
reference kernel gathers each layer's keys itself, so it is not faster there; the
option exists so that both paths run, and are tested, everywhere.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence
from typing import Any

import torch

from genlm_hf._device import to_device
from genlm_hf._forward import ForwardInput, KVLayout, keep_kwargs, last_logits
from genlm_hf._graphs import DecodeGraphs, cuda_capture
from genlm_hf._logits import linears, logits_into
from genlm_hf._workspace import Workspace
from genlm_hf.kvcache import PrefixKVCache

__all__ = ["KV_READS", "InPlaceForward", "in_place_forward"]

#: The values of ``AsyncTransformer(kv_reads=...)``.
KV_READS = ("gather", "in_place")


class InPlaceForward:
    """One forward over rows whose pasts are read from the pool, new positions kept there.

    Handed what it uses: the model, its K/V layout, the prefix cache whose pool it
    reads and writes, and the forward's options (as for `run_group`).
    """

    def __init__(
        self,
        model: Any,
        layout: KVLayout,
        kv_cache: PrefixKVCache,
        *,
        keep_kwarg: bool,
        logits_workspace: Workspace | None,
        helper: concurrent.futures.Executor | None,
        onednn: bool,
        graphs: DecodeGraphs | None = None,
    ) -> None:
        self._graphs = graphs  # decode steps replayed from CUDA graphs (genlm_hf._graphs)
        self._model = model
        self._layout = layout
        self._kv_cache = kv_cache
        self._keep_kwarg = keep_kwarg
        self._logits_workspace = logits_workspace
        self._helper = helper
        self._onednn = onednn
        self._like = torch.empty(  # one position's keys and values, to make the pool from
            (2 * layout.layers, layout.heads, 1, layout.head_dim),
            dtype=layout.dtype,
            device=layout.device,
        )

    def forget_graphs(self) -> None:
        """Drop the captured decode steps (an adapter was loaded or removed)."""
        if self._graphs is not None:
            self._graphs.clear()

    @torch.no_grad()
    def __call__(self, adapter: Any, rows: Sequence[ForwardInput]) -> torch.Tensor | None:
        """Each row's last-position logits ``(B, vocab)``, its keys and values stored.

        None, with nothing computed, when the pool cannot hold the new positions
        (the cache is off, or full of these rows' own pasts): run the gather path.
        """
        from genlm_hf import _pool_attention as attention  # imports transformers

        cache = self._kv_cache
        requests = [(row.token_ids, row.past_len) for row in rows]
        reserved = cache.reserve(adapter, requests, self._like)
        if reserved is None:
            return None
        try:
            logits = None
            if self._graphs is not None and adapter is None:  # (graphs: the base model's)
                logits = self._graphs.run(rows, reserved, cache.pool, cache.dummy_slot)
            if logits is None:
                logits = self._forward(attention, rows, reserved)
        except BaseException:
            cache.release(reserved)
            raise
        cache.keep(adapter, requests, reserved)
        return logits

    def _forward(self, attention: Any, rows: Sequence[ForwardInput], reserved: Any) -> Any:
        model, layout, cache = self._model, self._layout, self._kv_cache
        device = layout.device
        assert cache.pool is not None and cache.dummy_slot is not None
        batch = attention.pool_batch(
            [row.segments for row in rows], reserved, cache.dummy_slot, device
        )
        n_new = [row.n_new for row in rows]
        width = batch.write_slots.shape[1]
        ids = [list(r.token_ids[r.past_len :]) + [0] * (width - r.n_new) for r in rows]
        n = torch.tensor(n_new, dtype=torch.long)[:, None]
        kwargs = keep_kwargs(self._keep_kwarg, False, n_new, n, device)
        workspace, helper, onednn = self._logits_workspace, self._helper, self._onednn
        with (
            logits_into(model, workspace, helper, onednn),
            linears(model, onednn),
            attention.pool_attention_on(model),
        ):
            out = model(
                to_device(torch.tensor(ids, dtype=torch.long), device),
                position_ids=batch.positions,
                use_cache=True,
                pool_batch=batch,
                **{layout.cache_arg: attention.PoolCache(cache.pool, batch)},
                **kwargs,
            )
        return last_logits(model, out.logits, n, width)


def in_place_forward(
    kv_reads: str,
    cuda_graphs: bool | None,
    model: Any,
    layout: KVLayout | None,
    kv_cache: PrefixKVCache,
    off_reason: str,
    max_batch: int,
    **options: Any,
) -> InPlaceForward | None:
    """The model's in-place forward for ``kv_reads="in_place"``; None for ``"gather"``.

    ``cuda_graphs``: replay decode steps from CUDA graphs (None: where the model is on
    CUDA); ``max_batch``: the largest batch one is captured for.

    Raises:
        ValueError: ``kv_reads`` is neither, or ``"in_place"`` where prefix reuse is
            off (``off_reason`` says why); ``cuda_graphs=True`` without both CUDA and
            ``"in_place"``.
    """
    if kv_reads not in KV_READS:
        raise ValueError(f"kv_reads must be one of {KV_READS}, got {kv_reads!r}")
    on_cuda = layout is not None and layout.device.type == "cuda"
    if cuda_graphs and (kv_reads != "in_place" or not on_cuda):
        raise ValueError(
            f"cuda_graphs=True replays in-place decode steps on an NVIDIA GPU; this model "
            f"has kv_reads={kv_reads!r} on {layout.device if layout else 'no prefix cache'}: "
            f"pass kv_reads='in_place' with a CUDA model, or cuda_graphs=None"
        )
    if kv_reads == "gather":
        return None
    if layout is None:
        raise ValueError(
            f"kv_reads='in_place' reads the prefix cache, which is off for this model "
            f"({off_reason or 'kv_cache_bytes=0'}); pass kv_reads='gather'"
        )
    graphs = None
    if on_cuda and cuda_graphs is not False:
        graphs = DecodeGraphs(model, layout, capture=cuda_capture, max_batch=max_batch)
    return InPlaceForward(model, layout, kv_cache, graphs=graphs, **options)

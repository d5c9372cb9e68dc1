"""One batched forward over the new tokens of many requests, with their cached pasts.

Layout of a batch of ``B`` rows, past width ``P`` (longest cached prefix) and new width
``N`` (most new tokens)::

    row i:  [ zeros (P - p_i) | cached past (p_i) | new tokens (n_i) | pad (N - n_i) ]
            <--------------- past slots --------> <-------- input slots -------->

* The past is **left**-padded, so every row's past ends at slot ``P`` and the new
  tokens of all rows start together. Padding slots are zeros (finite: a masked slot
  gets weight 0, and ``0 * nan`` would still poison the row) and masked out.
* The new tokens are **right**-padded, so no query row is ever fully masked (a pad
  query sees the real tokens before it) and pads are invisible to real tokens by
  causality alone. Logits are taken per row at its last real token
  (``logits_to_keep`` of shape ``(B, 1)``): the vocabulary projection runs on ``B``
  positions, not ``B * N``.
* Position ids are explicit (``p_i + j``), right for absolute-position models (GPT-2)
  and rotary ones (Llama) alike; cached keys were rotated at their own positions, so
  shifting them to other slots changes nothing.

Minimal copying: all layers' keys and values live in one preallocated buffer of shape
``(2 * layers, B, heads, P + N, head_dim)``. Each cached segment is copied into it once;
the model writes its new keys and values in place (`SlotLayer`, instead of
``DynamicCache``'s concatenation per layer and step); storing a row's new positions
back into the prefix cache is one slice of that buffer.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import inspect
from collections.abc import Collection, Sequence
from typing import Any

import torch

from genlm_hf._device import CPU_COPY_BYTES, index_on, to_device
from genlm_hf._logits import linears, log_softmax_rows, logits_into
from genlm_hf._workspace import Workspace
from genlm_hf.kvcache import SlotRun

__all__ = [
    "KVLayout",
    "ForwardInput",
    "Workspace",
    "log_softmax_rows",
    "probe_layout",
    "run_group",
]


@dataclasses.dataclass(frozen=True)
class KVLayout:
    """Shape of a model's key/value cache, uniform across layers.

    Attributes:
        layers: Decoder layers.
        heads: Key/value heads per layer.
        head_dim: Size of one head.
        dtype: Dtype of keys and values.
        device: Where they live.
        cache_arg: The keyword ``model.forward`` takes the cache by (see
            [`cache_argument`][]).
    """

    layers: int
    heads: int
    head_dim: int
    dtype: torch.dtype
    device: torch.device
    cache_arg: str = "past_key_values"

    @property
    def bytes_per_token(self) -> int:
        """Bytes of keys and values one position takes over all layers."""
        elem = torch.empty((), dtype=self.dtype).element_size()
        return 2 * self.layers * self.heads * self.head_dim * elem


@dataclasses.dataclass
class ForwardInput:
    """One request of a batch: its tokens and the cached segments of its past.

    Attributes:
        token_ids: The whole prompt.
        segments: Pool slots holding the K/V of positions ``0 .. past_len - 1``.
        past_len: Positions reused from the cache.
    """

    token_ids: tuple[int, ...]
    segments: list[SlotRun]
    past_len: int

    @property
    def n_new(self) -> int:
        """Positions this forward computes."""
        return len(self.token_ids) - self.past_len


def _forward_parameters(model: Any) -> Collection[str]:
    """The parameter names of the model class's ``forward``.

    The class's method is read, so a ``forward`` wrapped on the instance (by a
    profiler, a benchmark's clock, a test) does not hide what the model accepts.
    """
    try:
        return inspect.signature(type(model).forward).parameters.keys()
    except (TypeError, ValueError):  # pragma: no cover - exotic wrappers
        return ()


def accepts_logits_to_keep(model: Any) -> bool:
    """Whether ``model.forward`` takes ``logits_to_keep`` (all transformers>=4.50 LMs do)."""
    return "logits_to_keep" in _forward_parameters(model)


def cache_argument(model: Any) -> str:
    """The keyword ``model.forward`` takes its K/V cache by.

    transformers 5.24 renamed ``past_key_values`` to ``cache`` (the old name warns, and
    goes in 5.40); earlier releases know only ``past_key_values``.
    """
    return "cache" if "cache" in _forward_parameters(model) else "past_key_values"


@torch.no_grad()
def probe_layout(model: Any) -> tuple[KVLayout | None, str]:
    """Run a one-token forward and read the cache's shape.

    Returns:
        The layout, or None with the reason why prefix reuse is off for this model
        (hybrid/linear-attention caches, layers of different shapes or devices).
    """
    from transformers import DynamicCache  # here: `genlm backends --options` stays light
    from transformers.cache_utils import DynamicLayer

    cache = DynamicCache()
    cache_arg = cache_argument(model)
    try:
        model(
            torch.zeros((1, 1), dtype=torch.long, device=_input_device(model)),
            use_cache=True,
            **{cache_arg: cache},
        )
    except Exception as exc:  # noqa: BLE001 - any failure means: no prefix reuse
        return None, f"a forward with a DynamicCache failed ({type(exc).__name__}: {exc})"
    layers = list(cache.layers)
    if not layers or any(type(layer) is not DynamicLayer for layer in layers):
        kinds = sorted({type(layer).__name__ for layer in layers})
        return None, f"the model's cache has layers of type {kinds}, not plain DynamicLayer"
    shapes = {(tuple(la.keys.shape), tuple(la.values.shape)) for la in layers}
    devices = {la.keys.device for la in layers}
    dtypes = {la.keys.dtype for la in layers}
    if len(shapes) != 1 or len(devices) != 1 or len(dtypes) != 1:
        return None, "cache layers differ in shape, dtype or device"
    ((kshape, vshape),) = shapes
    if kshape != vshape or len(kshape) != 4 or kshape[0] != 1 or kshape[2] != 1:
        return None, f"unexpected key/value shapes {kshape} / {vshape}"
    return (
        KVLayout(
            layers=len(layers),
            heads=kshape[1],
            head_dim=kshape[3],
            dtype=dtypes.pop(),
            device=devices.pop(),
            cache_arg=cache_arg,
        ),
        "",
    )


def _input_device(model: Any) -> torch.device:
    emb = model.get_input_embeddings()
    return emb.weight.device if emb is not None else model.device


def _gather_pasts(
    buffer: torch.Tensor,
    rows: Sequence[ForwardInput],
    width_past: int,
    pool: torch.Tensor | None,
    max_copy_bytes: int = CPU_COPY_BYTES,
    scratch: Workspace | None = None,
) -> None:
    """Fill the past slots of ``buffer`` from the pool, left-padded with zeros.

    Small batches (a sampler's steps on a small model): one ``index_select`` over
    every row's slots and one strided copy, however many rows and segments. Larger
    ones: per row, one copy for a single run or one ``index_select`` into a reused
    scratch row, so the temporary stays one row's past (at most ``max_copy_bytes``
    in the batched path). Index tensors reach the device without a host
    synchronisation (`index_on`), all rows' at once.
    """
    if width_past == 0:
        return
    assert pool is not None  # a cached past lives in the pool
    layers2, batch, heads, _, dim = buffer.shape
    if batch * width_past * layers2 * heads * dim * buffer.element_size() <= max_copy_bytes:
        slots: list[int] = []
        padding: list[int] = []
        for row in rows:
            pad = width_past - row.past_len
            if pad:
                padding.extend(range(len(slots), len(slots) + pad))
                slots.extend([0] * pad)  # any slot: zeroed in the gathered copy
            for start, n in row.segments:
                slots.extend(range(start, start + n))
        index = index_on(slots, pool.device)
        shape = (layers2, heads, len(slots), dim)
        gathered = scratch.get(shape, pool.dtype, pool.device) if scratch else None
        gathered = torch.index_select(pool, 2, index, out=gathered)  # (layers2, heads, B*P, dim)
        if padding:  # one fill, not one per row
            gathered.index_fill_(2, index_on(padding, pool.device), 0)
        buffer[:, :, :, :width_past].copy_(
            gathered.view(layers2, heads, batch, width_past, dim).transpose(1, 2)
        )
        return
    scratch: torch.Tensor | None = None
    # The slots of every row with several segments, sent to the device in one copy.
    multi = [row for row in rows if len(row.segments) > 1]
    flat_slots = [s for row in multi for start, n in row.segments for s in range(start, start + n)]
    all_index = index_on(flat_slots, pool.device) if multi else None
    at = 0
    for i, row in enumerate(rows):
        if not row.segments:
            continue
        dest = buffer[:, i, :, width_past - row.past_len : width_past]
        if len(row.segments) == 1:
            start, n = row.segments[0]
            dest.copy_(pool[:, :, start : start + n])
            continue
        if scratch is None:  # flat, so that every row's view of it is contiguous
            scratch = torch.empty(
                layers2 * heads * width_past * dim, dtype=pool.dtype, device=pool.device
            )
        out = scratch[: layers2 * heads * row.past_len * dim].view(
            layers2, heads, row.past_len, dim
        )
        assert all_index is not None
        torch.index_select(pool, 2, all_index[at : at + row.past_len], out=out)
        at += row.past_len
        dest.copy_(out)
    for i, row in enumerate(rows):
        offset = width_past - row.past_len
        if offset:
            buffer[:, i, :, :offset].zero_()


@torch.no_grad()
def run_group(
    model: Any,
    rows: Sequence[ForwardInput],
    layout: KVLayout | None,
    *,
    keep_kwarg: bool = True,
    workspace: Workspace | None = None,
    pool: torch.Tensor | None = None,
    logits_workspace: Workspace | None = None,
    helper: concurrent.futures.Executor | None = None,
    onednn: bool = False,
    all_positions: bool = False,
    max_copy_bytes: int = CPU_COPY_BYTES,
    gather_workspace: Workspace | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, int]:
    """Run one forward for ``rows``.

    Args:
        model: A transformers causal LM.
        rows: The requests (with ``past_len == 0`` when ``layout`` is None).
        layout: The model's KV layout, or None to run without a cache.
        keep_kwarg: The model accepts ``logits_to_keep``.
        workspace: Where to take the K/V buffer from (a fresh tensor if None). The
            buffer is only valid until the next call with the same workspace.
        pool: The prefix cache's slot pool the rows' segments point into.
        logits_workspace: Where a plain linear output head writes its logits (see
            `_logits_into`); they are then only valid until the next call.
        helper: A one-thread executor that shares the output projection's blocks.
        onednn: Run the model's float32 linear layers through oneDNN (see
            `genlm_hf._linear`).
        all_positions: Return the logits of every new position, ``(B, N, vocab)``
            (row ``i``'s are ``logits[i, :n_i]``), not only each row's last.
        max_copy_bytes: Largest temporary of the batched past gather (see
            `default_budgets`).
        gather_workspace: Where that temporary is taken from (fresh if None).

    Returns:
        ``(logits, buffer, P)``: last-position logits of shape ``(B, vocab)`` (or all
        positions', see ``all_positions``); the K/V buffer (``None`` without a layout),
        in which row ``i``'s new positions are ``buffer[:, i, :, P : P + n_i]``; and
        the past width ``P``.
    """
    from genlm_hf import _slot_cache as slot_cache  # (imports transformers: not at import)

    device = layout.device if layout is not None else _input_device(model)
    b = len(rows)
    past_lens = [r.past_len for r in rows]
    n_new = [r.n_new for r in rows]
    width_past = max(past_lens)
    width_new = max(n_new)

    input_ids = torch.tensor(
        [
            list(r.token_ids[r.past_len :]) + [0] * (width_new - n)
            for r, n in zip(rows, n_new, strict=True)
        ],
        dtype=torch.long,
    )
    p = torch.tensor(past_lens, dtype=torch.long)[:, None]
    n = torch.tensor(n_new, dtype=torch.long)[:, None]
    slots = torch.arange(width_past + width_new)[None, :]
    attention_mask = ((slots >= width_past - p) & (slots < width_past + n)).long()
    position_ids = torch.minimum(p + torch.arange(width_new)[None, :], p + n - 1)

    kwargs = keep_kwargs(keep_kwarg, all_positions, n_new, n, device)

    buffer = None
    if layout is not None:
        shape = (2 * layout.layers, b, layout.heads, width_past + width_new, layout.head_dim)
        if workspace is not None:
            buffer = workspace.get(shape, layout.dtype, device)
        else:
            buffer = torch.empty(shape, dtype=layout.dtype, device=device)
        _gather_pasts(buffer, rows, width_past, pool, max_copy_bytes, gather_workspace)
        with logits_into(model, logits_workspace, helper, onednn), linears(model, onednn):
            out = model(
                to_device(input_ids, device),
                attention_mask=to_device(attention_mask, device),
                position_ids=to_device(position_ids, device),
                use_cache=True,
                **{layout.cache_arg: slot_cache.SlotCache(buffer, width_past)},
                **kwargs,
            )
    else:
        with linears(model, onednn):
            out = model(
                to_device(input_ids, device),
                attention_mask=to_device(attention_mask, device),
                position_ids=to_device(position_ids, device),
                use_cache=False,
                **kwargs,
            )
    if all_positions:
        return out.logits, buffer, width_past
    return last_logits(model, out.logits, n, width_new), buffer, width_past


def keep_kwargs(
    keep_kwarg: bool, all_positions: bool, n_new: list[int], n: torch.Tensor, device: torch.device
) -> dict[str, Any]:
    """The ``logits_to_keep`` argument of a forward of rows of ``n_new`` new tokens.

    Every position with ``all_positions``; else the last one, per row (``n``:
    ``n_new`` as a ``(B, 1)`` tensor) where rows differ and transformers allows it.
    """
    if not keep_kwarg:
        return {}
    if all_positions:
        return {"logits_to_keep": 0}  # every position
    if all(k == n_new[0] for k in n_new):
        return {"logits_to_keep": 1}
    from genlm_hf import _slot_cache as slot_cache  # (imports transformers: only here)

    if slot_cache.PER_ROW_KEEP:
        return {"logits_to_keep": to_device(n - 1, device)}
    return {}


def last_logits(model: Any, logits: torch.Tensor, n: torch.Tensor, width_new: int) -> torch.Tensor:
    """Each row's logits at its last new position, ``(B, vocab)``, from a forward's."""
    if logits.shape[1] == 1:
        return logits[:, 0]
    if logits.shape[1] == width_new:
        return logits[torch.arange(logits.shape[0]), to_device(n - 1, logits.device).squeeze(1)]
    raise RuntimeError(  # pragma: no cover - a model that ignored logits_to_keep oddly
        f"{type(model).__name__} returned logits of shape {tuple(logits.shape)} for "
        f"{logits.shape[0]} rows of {width_new} new tokens"
    )

"""Attention that reads every row's keys and values in place, from the slot pool.

Today a grouped forward (`genlm_hf._forward`) copies each row's cached past out of the
prefix cache's slot pool into a padded batch, and after the forward copies the new
positions back. Here instead, the pool is the cache: each new key and value is
written straight into a slot reserved for it ([`PoolCache`][]), and the attention
function registered as ``"genlm_pool"`` reads each row's keys and values through index
arrays ([`PoolBatch`][]): the prefix tree's runs of slots are the page table, one slot
per position, as in SGLang's token pool. No gather before the forward, no store after.

[`reference_attention`][] is the pure-torch kernel (the CPU's, and the oracle of the
Triton one CUDA gets, `genlm_hf._triton_attention`, which reads the pool through the
indices without a copy); it materialises each layer's keys and values of the batch, so
on a CPU it saves no copy, only the up-front gather of all layers at once.

Transformers is imported here, so `genlm_hf` imports this module only when a forward
needs it (``genlm backends --options hf`` stays light).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from transformers import AttentionInterface, DynamicCache
from transformers.cache_utils import Cache, DynamicLayer

from genlm_hf._device import to_device
from genlm_hf.kvcache import SlotRun, slots_of

__all__ = [
    "ATTENTION",
    "PoolBatch",
    "PoolCache",
    "kernel_for",
    "pool_attention",
    "pool_attention_on",
    "pool_batch",
    "reference_attention",
]

#: The name the attention function is registered under (``config._attn_implementation``).
ATTENTION = "genlm_pool"


@dataclasses.dataclass(frozen=True)
class PoolBatch:
    """The index arrays of one forward over the pool (all on the pool's device).

    Row ``i`` has ``p_i`` cached positions and ``n_i`` new ones; its keys, in position
    order, are ``kv_slots[i, : p_i + n_i]``, the new ones last.

    Attributes:
        write_slots: ``(B, N)``: the slot each new position's key and value go to;
            padding (``j >= n_i``) goes to the dummy slot.
        kv_slots: ``(B, L)``: the slots of every position a row attends to, padded
            with the dummy slot.
        kv_lens: ``(B,)``: ``p_i + n_i``.
        positions: ``(B, N)``: each new position (a padding query repeats the row's
            last, so it is never fully masked and its output is ignored).
        past_width: ``max p_i`` (what the model reads as the cache's length).
    """

    write_slots: torch.Tensor
    kv_slots: torch.Tensor
    kv_lens: torch.Tensor
    positions: torch.Tensor
    past_width: int


def pool_batch(
    pasts: Sequence[Sequence[SlotRun]],
    writes: Sequence[Sequence[SlotRun]],
    dummy: int,
    device: torch.device | str = "cpu",
    *,
    new_width: int | None = None,
    kv_width: int | None = None,
) -> PoolBatch:
    """The index arrays of a forward whose row ``i`` reads ``pasts[i]`` and writes ``writes[i]``.

    Args:
        pasts: Per row, the runs of slots holding its cached positions ``0 .. p_i - 1``.
        writes: Per row, the runs of slots reserved for its new positions (at least one).
        dummy: A slot no row reads or keeps (zeroed by the caller): padding writes there.
        device: Where the arrays go (one copy of all of them).
        new_width: Pad the new positions to this many (a CUDA graph's bucket); default
            the most new positions of a row.
        kv_width: Pad the keys to this many; default the longest row.

    Raises:
        ValueError: A row writes nothing, or a width is smaller than a row needs.
    """
    if len(pasts) != len(writes) or not writes:
        raise ValueError(f"need one past and one write per row, got {len(pasts)} and {len(writes)}")
    past_slots = [slots_of(runs) for runs in pasts]
    write_slots = [slots_of(runs) for runs in writes]
    if any(not w for w in write_slots):
        raise ValueError("every row computes at least one new position; a row has no write slots")
    longest_new = max(len(w) for w in write_slots)
    longest_kv = max(len(p) + len(w) for p, w in zip(past_slots, write_slots, strict=True))
    n_width = longest_new if new_width is None else new_width
    l_width = longest_kv if kv_width is None else kv_width
    if n_width < longest_new or l_width < longest_kv:
        raise ValueError(
            f"new_width={new_width} / kv_width={kv_width} are smaller than the batch needs "
            f"({longest_new} new positions, {longest_kv} keys in a row)"
        )
    writes_padded, kv_padded, lens, positions = [], [], [], []
    for past, new in zip(past_slots, write_slots, strict=True):
        p, n = len(past), len(new)
        writes_padded.append(new + [dummy] * (n_width - n))
        kv_padded.append(past + new + [dummy] * (l_width - p - n))
        lens.append(p + n)
        positions.append([p + min(j, n - 1) for j in range(n_width)])
    # One tensor, one copy to the device, then views.
    flat = torch.tensor(
        [v for row in writes_padded for v in row]
        + [v for row in kv_padded for v in row]
        + lens
        + [v for row in positions for v in row],
        dtype=torch.long,
    )
    flat = to_device(flat, torch.device(device))
    b = len(write_slots)
    cuts = [b * n_width, b * l_width, b, b * n_width]
    w, kv, ln, pos = torch.split(flat, cuts)
    return PoolBatch(
        write_slots=w.view(b, n_width),
        kv_slots=kv.view(b, l_width),
        kv_lens=ln,
        positions=pos.view(b, n_width),
        past_width=max(len(p) for p in past_slots),
    )


class PoolLayer(DynamicLayer):
    """One layer of the pool: new keys and values are written to their reserved slots.

    ``update`` returns the layer's whole pool (``(heads, slots, head_dim)``), which only
    [`pool_attention`][] understands.
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, batch: PoolBatch) -> None:
        super().__init__()
        self.keys, self.values = keys, values
        self.dtype, self.device = keys.dtype, keys.device
        self.is_initialized = True
        self._batch = batch

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        slots = self._batch.write_slots.reshape(-1)
        heads, dim = key_states.shape[1], key_states.shape[3]
        self.keys.index_copy_(1, slots, key_states.transpose(0, 1).reshape(heads, -1, dim))
        self.values.index_copy_(1, slots, value_states.transpose(0, 1).reshape(heads, -1, dim))
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self._batch.past_width

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self._batch.kv_slots.shape[1], 0


class PoolCache(DynamicCache):
    """A cache of [`PoolLayer`][]s over the pool ``(2 * layers, heads, slots, dim)``."""

    def __init__(self, pool: torch.Tensor, batch: PoolBatch) -> None:
        layers = [PoolLayer(pool[2 * i], pool[2 * i + 1], batch) for i in range(pool.shape[0] // 2)]
        Cache.__init__(self, layers=layers)


def reference_attention(
    query: torch.Tensor,
    key_pool: torch.Tensor,
    value_pool: torch.Tensor,
    batch: PoolBatch,
    scaling: float,
    sliding_window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """Causal attention of ``query`` ``(B, Hq, N, D)`` over the pool; ``(B, N, Hq, D)``.

    Keys and values are gathered per layer through ``batch.kv_slots`` (grouped-query
    heads read their shared key head without a copy). Scores are float32; masked:
    keys past a row's length, keys after the query's position, and with
    ``sliding_window`` keys ``sliding_window`` or more positions back (transformers'
    rule). ``softcap``: Gemma-2's ``tanh`` capping of the scores, before the mask.
    """
    b, hq, n, d = query.shape
    hk = key_pool.shape[0]
    groups = hq // hk
    length = batch.kv_slots.shape[1]
    keys = key_pool[:, batch.kv_slots].transpose(0, 1)  # (B, Hk, L, D)
    values = value_pool[:, batch.kv_slots].transpose(0, 1)
    q = query.reshape(b, hk, groups * n, d)  # query heads h*groups .. share key head h
    scores = torch.matmul(q.float(), keys.float().transpose(-1, -2)) * scaling
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    key_pos = torch.arange(length, device=query.device)
    q_pos = batch.positions.repeat(1, groups)[:, None, :, None]  # (B, 1, G*N, 1)
    allowed = (key_pos <= q_pos) & (key_pos < batch.kv_lens[:, None, None, None])
    if sliding_window is not None:
        allowed &= key_pos > q_pos - sliding_window
    scores = scores.masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(values.dtype)
    out = torch.matmul(probs, values)  # (B, Hk, G*N, D)
    return out.view(b, hq, n, d).transpose(1, 2)


def pool_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Any,
    *,
    scaling: float | None = None,
    dropout: float = 0.0,
    sliding_window: int | None = None,
    softcap: float | None = None,
    pool_batch: PoolBatch | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention over [`PoolCache`][], for transformers (the model is given ``pool_batch``)."""
    if pool_batch is None or key.dim() != 3:
        raise RuntimeError(
            f"the {ATTENTION!r} attention runs only in genlm-hf's in-place forwards "
            f"(a PoolCache and pool_batch=...); set the model's attention back to run it alone"
        )
    if dropout:
        raise ValueError(f"{ATTENTION!r} attention computes inference only; got dropout={dropout}")
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    kernel = kernel_for(query.device)
    return kernel(query, key, value, pool_batch, scaling, sliding_window, softcap), None


_KERNELS: dict[str, Callable[..., torch.Tensor]] = {}  # device type -> kernel


def kernel_for(device: torch.device) -> Callable[..., torch.Tensor]:
    """The attention kernel for ``device``: Triton's on CUDA where installed, else the reference.

    Chosen once per device type and kept in a plain dict (what a traced forward reads
    without a graph break).
    """
    kernel = _KERNELS.get(device.type)
    if kernel is None:
        kernel = reference_attention
        if device.type == "cuda" and importlib.util.find_spec("triton") is not None:
            from genlm_hf._triton_attention import triton_attention

            kernel = triton_attention
        _KERNELS[device.type] = kernel
    return kernel


AttentionInterface.register(ATTENTION, pool_attention)


@contextlib.contextmanager
def pool_attention_on(model: Any) -> Iterator[None]:
    """During the block, ``model``'s attention layers call [`pool_attention`][].

    The attention name of its config (and of its text config, which a multimodal
    model's layers read) is swapped and put back (the layers read it per call);
    transformers builds no mask for a name it has no mask function for.
    """
    configs = {id(c): c for c in (model.config, model.config.get_text_config())}.values()
    before = [(config, config._attn_implementation) for config in configs]
    for config, _ in before:
        config._attn_implementation = ATTENTION
    try:
        yield
    finally:
        for config, name in before:
            config._attn_implementation = name

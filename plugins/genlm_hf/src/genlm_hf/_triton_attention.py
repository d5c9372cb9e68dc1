"""The Triton kernel of the pool attention (`genlm_hf._pool_attention`), for CUDA.

One program per (row, query head, new position) walks that row's keys in blocks of
``BLOCK_L`` slots, reading them from the pool through the row's slot indices (no
gathered copy), with an online softmax in float32 (FlashAttention's recurrence).
Grouped-query heads read their shared key head; Gemma-2's score capping and sliding
window are compile-time branches. What it computes is
[`reference_attention`][genlm_hf._pool_attention.reference_attention]; tests compare the
two, on a CPU through Triton's interpreter (``TRITON_INTERPRET=1``).

Imported only where Triton is installed (CUDA builds of torch ship it).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

__all__ = ["triton_attention"]

#: Keys per block of the walk.
BLOCK_L = 32


@triton.jit
def _pool_attention_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    o_ptr,
    slots_ptr,
    lens_ptr,
    pos_ptr,
    stride_qb,
    stride_qh,
    stride_qn,
    stride_kh,
    stride_ks,
    stride_vh,
    stride_vs,
    stride_ob,
    stride_on,
    stride_oh,
    stride_slots,
    stride_pos,
    scaling,
    softcap,
    window,
    GROUPS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_L: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    n = tl.program_id(2)
    kv_head = h // GROUPS
    d = tl.arange(0, BLOCK_D)
    d_ok = d < HEAD_DIM
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + n * stride_qn + d, mask=d_ok, other=0.0)
    q = q.to(tl.float32)
    pos = tl.load(pos_ptr + b * stride_pos + n)
    end = tl.minimum(tl.load(lens_ptr + b), pos + 1)  # causal, and within the row
    start = 0
    if HAS_WINDOW:
        start = tl.maximum(pos - window + 1, 0)
    first = (start // BLOCK_L) * BLOCK_L  # every block then holds a key to attend
    m_i = float("-inf")
    l_i = 0.0
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for block in range(first, end, BLOCK_L):
        offs = block + tl.arange(0, BLOCK_L)
        ok = (offs >= start) & (offs < end)
        slots = tl.load(slots_ptr + b * stride_slots + offs, mask=ok, other=0)
        both = ok[:, None] & d_ok[None, :]
        k = tl.load(
            k_ptr + kv_head * stride_kh + slots[:, None] * stride_ks + d[None, :],
            mask=both,
            other=0.0,
        ).to(tl.float32)
        s = tl.sum(k * q[None, :], axis=1) * scaling
        if HAS_SOFTCAP:  # softcap * tanh(s / softcap), tanh(x) = 2 sigmoid(2x) - 1
            s = softcap * (2.0 * tl.sigmoid(2.0 * s / softcap) - 1.0)
        s = tl.where(ok, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        v = tl.load(
            v_ptr + kv_head * stride_vh + slots[:, None] * stride_vs + d[None, :],
            mask=both,
            other=0.0,
        ).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        m_i = m_new
    out = acc / l_i
    tl.store(
        o_ptr + b * stride_ob + n * stride_on + h * stride_oh + d,
        out.to(o_ptr.dtype.element_ty),
        mask=d_ok,
    )


def triton_attention(
    query: torch.Tensor,
    key_pool: torch.Tensor,
    value_pool: torch.Tensor,
    batch: Any,
    scaling: float,
    sliding_window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """[`reference_attention`][genlm_hf._pool_attention.reference_attention]'s result by the kernel.

    ``query`` ``(B, Hq, N, D)``; the pools ``(Hk, slots, D)`` with a unit stride along
    ``D``; returns ``(B, N, Hq, D)``.
    """
    b, hq, n, d = query.shape
    hk = key_pool.shape[0]
    if key_pool.stride(-1) != 1 or value_pool.stride(-1) != 1:
        raise ValueError("the pool's head_dim must be contiguous (stride 1)")
    query = query if query.stride(-1) == 1 else query.contiguous()
    out = torch.empty((b, n, hq, d), dtype=query.dtype, device=query.device)
    slots, positions = batch.kv_slots, batch.positions
    _pool_attention_kernel[(b, hq, n)](
        query,
        key_pool,
        value_pool,
        out,
        slots,
        batch.kv_lens,
        positions,
        query.stride(0),
        query.stride(1),
        query.stride(2),
        key_pool.stride(0),
        key_pool.stride(1),
        value_pool.stride(0),
        value_pool.stride(1),
        out.stride(0),
        out.stride(1),
        out.stride(2),
        slots.stride(0),
        positions.stride(0),
        float(scaling),
        float(softcap or 1.0),
        int(sliding_window or 0),
        GROUPS=hq // hk,
        HEAD_DIM=d,
        BLOCK_D=triton.next_power_of_2(d),
        BLOCK_L=BLOCK_L,
        HAS_SOFTCAP=softcap is not None,
        HAS_WINDOW=sliding_window is not None,
    )
    return out

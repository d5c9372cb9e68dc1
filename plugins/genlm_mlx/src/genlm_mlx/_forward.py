"""One batched mlx-lm forward over the new tokens of many requests, with cached pasts.

Layout of a batch of ``B`` rows, past width ``P`` (longest cached prefix) and new width
``N`` (most new tokens)::

    row i:  [ zeros (P - p_i) | cached past (p_i) | new tokens (n_i) | pad (N - n_i) ]

* The past is **left**-padded, so every row's new tokens start at slot ``P``; the
  padding slots are zeros (finite) and masked out.
* The new tokens are **right**-padded: pads come after every real token, so causality
  alone hides them, and no query row is ever fully masked.
* Rotary positions come from the per-layer cache's ``offset``, here an array holding
  each row's ``p_i`` (mlx's ``fast.rope`` takes one offset per row). Cached keys were
  rotated at their own positions, so moving them to other slots changes nothing.

mlx-lm models take a list of per-layer cache objects with ``offset``,
``update_and_fetch`` and ``make_mask``; `_LayerCache` is one that holds the
assembled past, returns the boolean mask built here, and keeps the layer's new keys and
values so they can be stored in the prefix cache after the forward.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import mlx.core as mx

__all__ = ["ForwardInput", "last_logits", "run_group", "run_plain"]


@dataclasses.dataclass
class ForwardInput:
    """One request of a batch: its tokens and the cached key/values of its past.

    Attributes:
        token_ids: The whole prompt.
        parts: Key/value arrays ``(2 * layers, heads, n, dim)`` of positions
            ``0 .. past_len - 1``, in order.
        past_len: Positions reused from the cache.
    """

    token_ids: tuple[int, ...]
    parts: list[mx.array]
    past_len: int

    @property
    def n_new(self) -> int:
        """Positions this forward computes."""
        return len(self.token_ids) - self.past_len


class _LayerCache:
    """An mlx-lm cache layer over an assembled past: concatenates, never stores."""

    def __init__(
        self, keys: mx.array | None, values: mx.array | None, offset: Any, mask: Any
    ) -> None:
        self.keys = keys
        self.values = values
        self.offset = offset
        self._mask = mask
        self.new_keys: mx.array | None = None
        self.new_values: mx.array | None = None

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        self.new_keys, self.new_values = keys, values
        if self.keys is None:
            return keys, values
        return (
            mx.concatenate([self.keys, keys], axis=2),
            mx.concatenate([self.values, values], axis=2),
        )

    def make_mask(self, n: int, *args: Any, window_size: int | None = None, **kwargs: Any) -> Any:
        if window_size is not None:
            raise NotImplementedError("sliding-window attention is not supported by prefix reuse")
        return self._mask

    def empty(self) -> bool:
        return self.keys is None

    @property
    def state(self) -> tuple[mx.array | None, mx.array | None]:
        return self.keys, self.values


def last_logits(logits: mx.array, n_new: Sequence[int]) -> mx.array:
    """Float32 logits at each row's last real position, ``(B, vocab)``.

    Normalising is left to torch's ``log_softmax`` on the host: mlx's CPU
    ``logsumexp`` over a 50k vocabulary is off by ~1e-4, torch's by ~1e-6.
    """
    width = logits.shape[1]
    if width == 1:
        last = logits[:, 0]
    elif all(n == width for n in n_new):
        last = logits[:, -1]
    else:
        index = mx.array([n - 1 for n in n_new])[:, None, None]
        last = mx.take_along_axis(logits, index, axis=1).squeeze(1)
    return last.astype(mx.float32)


def _inputs(rows: Sequence[ForwardInput], width_new: int) -> mx.array:
    return mx.array(
        [list(r.token_ids[r.past_len :]) + [0] * (width_new - r.n_new) for r in rows],
        dtype=mx.int32,
    )


def run_plain(model: Any, rows: Sequence[ForwardInput]) -> mx.array:
    """Last-position logits of whole prompts, right-padded, without any cache."""
    width = max(r.n_new for r in rows)
    logits = model(_inputs(rows, width))
    return last_logits(logits, [r.n_new for r in rows])


def run_group(
    model: Any, rows: Sequence[ForwardInput], n_layers: int
) -> tuple[mx.array, list[mx.array]]:
    """Run one forward for ``rows`` over their cached pasts.

    Args:
        model: An mlx-lm model whose attention layers use the standard cache protocol.
        rows: The requests.
        n_layers: Number of cache layers the model takes.

    Returns:
        ``(logits, kvs)``: float32 logits ``(B, vocab)`` at each row's last token and, per
        row, the keys/values ``(2 * layers, heads, n_i, dim)`` of its new positions.
        Both are evaluated.
    """
    b = len(rows)
    past_lens = [r.past_len for r in rows]
    n_new = [r.n_new for r in rows]
    width_past = max(past_lens)
    width_new = max(n_new)

    mask: Any
    if len(set(past_lens)) == 1 and len(set(n_new)) == 1:
        # No padding anywhere: plain causal attention (mlx's fused kernels).
        mask = None if width_new == 1 else "causal"
    else:
        # (B, 1, N, P + N): slot s is visible to query j of row i when it holds a real
        # past position (s >= P - p_i) and is not in the future (s <= P + j).
        p = mx.array(past_lens, dtype=mx.int32)[:, None, None]
        slots = mx.arange(width_past + width_new, dtype=mx.int32)[None, None, :]
        queries = mx.arange(width_new, dtype=mx.int32)[None, :, None]
        mask = ((slots >= width_past - p) & (slots <= width_past + queries))[:, None]

    past = None
    if width_past:
        ref = _first_part(rows)
        stacked = []
        for r in rows:
            parts = list(r.parts)
            pad = width_past - r.past_len
            if pad:
                shape = (ref.shape[0], ref.shape[1], pad, ref.shape[3])
                parts.insert(0, mx.zeros(shape, dtype=ref.dtype))
            stacked.append(parts[0] if len(parts) == 1 else mx.concatenate(parts, axis=2))
        past = mx.stack(stacked, axis=1)  # (2L, B, H, P, D)

    if len(set(past_lens)) == 1:
        offset: Any = past_lens[0]
    else:
        offset = mx.array(past_lens, dtype=mx.int32)
    caches = [
        _LayerCache(
            past[2 * i] if past is not None else None,
            past[2 * i + 1] if past is not None else None,
            offset,
            mask,
        )
        for i in range(n_layers)
    ]
    logits = model(_inputs(rows, width_new), cache=caches)
    logprobs = last_logits(logits, n_new)
    new = mx.stack([x for c in caches for x in (c.new_keys, c.new_values)])  # (2L,B,H,N,D)
    kvs = [mx.contiguous(new[:, i, :, : n_new[i]]) for i in range(b)]
    mx.eval(logprobs, *kvs)
    return logprobs, kvs


def _first_part(rows: Sequence[ForwardInput]) -> mx.array:
    for r in rows:
        if r.parts:
            return r.parts[0]
    raise AssertionError("a batch with a past has at least one cached part")

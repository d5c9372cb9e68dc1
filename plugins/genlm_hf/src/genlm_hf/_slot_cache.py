"""The cache a grouped forward writes into: transformers' cache types over our slots.

Apart from `genlm_hf._forward` so that importing genlm-hf does not import
transformers (``genlm backends --options hf`` reads the loader's signature only).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer

try:  # transformers >= 5.x: ``logits_to_keep`` may be a (batch, k) tensor of positions
    from transformers.modeling_utils import slice_logits_to_keep as _slice_logits_to_keep

    PER_ROW_KEEP = _slice_logits_to_keep is not None
except ImportError:  # pragma: no cover - older transformers: one set of positions for all rows
    PER_ROW_KEEP = False


class SlotLayer(DynamicLayer):
    """A cache layer over preallocated slots, written in place (no concatenation).

    The past is already in the slots; new keys and values are copied right after it.
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, filled: int) -> None:
        super().__init__()
        self.keys = keys
        self.values = values
        self.dtype, self.device = keys.dtype, keys.device
        self.is_initialized = True
        self._filled = filled

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        start = self._filled
        end = start + key_states.shape[-2]
        self.keys[:, :, start:end].copy_(key_states)
        self.values[:, :, start:end].copy_(value_states)
        self._filled = end
        return self.keys[:, :, :end], self.values[:, :, :end]

    def get_seq_length(self) -> int:
        return self._filled

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self._filled + query_length, 0


class SlotCache(DynamicCache):
    """A DynamicCache whose layers are `SlotLayer` views of one buffer."""

    def __init__(self, buffer: torch.Tensor, filled: int) -> None:
        layers = [
            SlotLayer(buffer[2 * i], buffer[2 * i + 1], filled) for i in range(buffer.shape[0] // 2)
        ]
        Cache.__init__(self, layers=layers)

"""Workspace: a scratch buffer reused from one forward to the next."""

from __future__ import annotations

import torch

__all__ = ["Workspace"]


class Workspace:
    """A scratch buffer for the forwards' K/V, reused from one batch to the next.

    Why: a fresh buffer of tens of MiB per forward, freed right after, makes glibc raise
    its mmap threshold; later mid-size tensors then come from the heap and fragment it.
    One reused buffer keeps resident memory flat. Buffers above ``keep_bytes`` are not
    kept.

    Args:
        keep_bytes: Largest buffer kept between forwards.
    """

    def __init__(self, keep_bytes: int) -> None:
        self.keep_bytes = keep_bytes
        self._flat: torch.Tensor | None = None

    def get(self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """An uninitialised tensor of ``shape`` (a view of the kept buffer when it fits)."""
        n = 1
        for d in shape:
            n *= d
        nbytes = n * torch.empty((), dtype=dtype).element_size()
        if nbytes > self.keep_bytes:
            return torch.empty(shape, dtype=dtype, device=device)
        flat = self._flat
        if flat is None or flat.numel() < n or flat.dtype != dtype or flat.device != device:
            flat = self._flat = None  # free the old one first
            elem = nbytes // n if n else 1
            size = min(max(n + n // 4, n), self.keep_bytes // elem)  # headroom to grow
            flat = self._flat = torch.empty(size, dtype=dtype, device=device)
        return flat[:n].view(shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the kept buffer."""
        flat = self._flat
        return 0 if flat is None else flat.numel() * flat.element_size()

    def release(self) -> None:
        """Drop the kept buffer."""
        self._flat = None

"""Check and convert token weights before they reach a kernel.

NumPy arrays, torch tensors (any device) and sequences of either; real dtypes only.
Bad input raises [`InvalidWeightsError`][genlm_core.trie.InvalidWeightsError] naming
the value.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from genlm_core.trie.errors import InvalidWeightsError

__all__ = ["as_batch", "as_vector", "check_batch", "check_vector", "nan_error", "real_tensor"]


def real_tensor(ws: Any) -> Any:
    """A torch tensor's weights, detached, on its own device: float16/bfloat16 as float32.

    Raises:
        InvalidWeightsError: A complex or bool tensor.
    """
    import torch

    ws = ws.detach()
    if ws.dtype in (torch.float16, torch.bfloat16):
        ws = ws.float()
    if ws.dtype.is_complex or ws.dtype == torch.bool:
        raise InvalidWeightsError(
            f"token weights must be real numbers, got a torch tensor of dtype {ws.dtype}; "
            f"pass float32 or float64 probabilities or log-probabilities"
        )
    return ws


def _to_array(ws: Any, what: str) -> np.ndarray:
    torch = sys.modules.get("torch")  # a tensor can only exist if torch is imported
    if torch is not None and isinstance(ws, torch.Tensor):
        arr = real_tensor(ws).cpu().numpy()  # cpu() returns a CPU tensor itself, no copy
    else:
        try:
            arr = np.asarray(ws)
        except (ValueError, TypeError) as exc:
            raise InvalidWeightsError(
                f"{what}: cannot read the token weights as an array ({exc}); "
                f"pass a NumPy array or torch tensor of floats"
            ) from None
    kind = arr.dtype.kind
    if kind == "f":
        if arr.dtype not in (np.float32, np.float64):
            arr = arr.astype(np.float64 if arr.dtype.itemsize > 8 else np.float32)
    elif kind in "iu":
        arr = arr.astype(np.float64)
    else:
        raise InvalidWeightsError(
            f"{what}: token weights must be real numbers, got dtype {arr.dtype}"
            f"{' (' + _preview(arr) + ')' if arr.size else ''}; "
            f"pass float32 or float64 probabilities or log-probabilities"
        )
    return arr


def _preview(arr: np.ndarray) -> str:
    flat = arr.reshape(-1)
    head = ", ".join(repr(x) for x in flat[:3].tolist())
    return head + (", ..." if flat.size > 3 else "")


def as_vector(ws: Any, vocab_size: int, what: str) -> np.ndarray:
    """One distribution as a C-contiguous float32/float64 array of shape ``(V,)``.

    Raises:
        InvalidWeightsError: Wrong dtype, dimension or length.
    """
    arr = _to_array(ws, what)
    check_vector(arr, vocab_size, what)
    return np.ascontiguousarray(arr)


def check_vector(arr: Any, vocab_size: int, what: str) -> None:
    """Raise unless ``arr`` (an array or tensor) has shape ``(vocab_size,)``."""
    shape = tuple(arr.shape)
    if len(shape) != 1:
        hint = f"; use batch_{what} for a batch" if len(shape) == 2 else ""
        raise InvalidWeightsError(
            f"{what} expects one weight vector of shape ({vocab_size},), "
            f"got an array of shape {shape}{hint}"
        )
    if shape[0] != vocab_size:
        raise InvalidWeightsError(
            f"{what} expects one weight per vocabulary entry, shape ({vocab_size},); "
            f"got shape {shape}. Are the weights from a model with a different vocabulary?"
        )


def as_batch(ws: Any, vocab_size: int, what: str) -> np.ndarray:
    """A batch as a C-contiguous float32/float64 array of shape ``(B, V)``.

    ``ws`` is a 2-D array/tensor or a sequence of 1-D weight vectors.

    Raises:
        InvalidWeightsError: Wrong dtype, dimension or length.
    """
    if isinstance(ws, Sequence) and not isinstance(ws, str | bytes):
        if len(ws) == 0:
            return np.empty((0, vocab_size), dtype=np.float64)
        rows = []
        for i, row in enumerate(ws):
            try:
                rows.append(as_vector(row, vocab_size, what))
            except InvalidWeightsError as exc:
                raise InvalidWeightsError(f"batch row {i}: {exc}") from None
        dtype = np.result_type(*{r.dtype for r in rows})
        return np.stack(rows).astype(dtype, copy=False)
    arr = _to_array(ws, f"batch_{what}")
    check_batch(arr, vocab_size, what)
    return np.ascontiguousarray(arr)


def check_batch(arr: Any, vocab_size: int, what: str) -> None:
    """Raise unless ``arr`` (an array or tensor) has shape ``(batch, vocab_size)``."""
    shape = tuple(arr.shape)
    if len(shape) != 2:
        raise InvalidWeightsError(
            f"batch_{what} expects a batch of shape (batch, {vocab_size}) or a list of "
            f"weight vectors, got an array of shape {shape}"
            + (f"; wrap one distribution as [ws] or call {what}" if len(shape) == 1 else "")
        )
    if shape[1] != vocab_size:
        raise InvalidWeightsError(
            f"batch_{what} expects one weight per vocabulary entry, shape "
            f"(batch, {vocab_size}); got shape {shape}. Are the weights from a model "
            f"with a different vocabulary?"
        )


def nan_error(what: str, position: int, word: Any, row: int | None = None) -> InvalidWeightsError:
    """The error for a NaN weight, naming the vocabulary entry (and batch row)."""
    where = f" in batch row {row}" if row is not None else ""
    return InvalidWeightsError(
        f"{what}: the weight of vocabulary entry {position} ({word!r}){where} is NaN; "
        f"a NaN would poison the mass of every prefix above it. Check the distribution "
        f"(e.g. 0 * log(0)) before passing it to the trie."
    )

"""Float32 linear layers on a CPU through oneDNN: the same product, about twice as fast here.

Why. torch computes a float32 ``nn.Linear`` on a CPU with the BLAS it links: MKL in
the x86 wheels, which is slow on the AMD CPU measured below (MKL is known to take
generic code paths on CPUs that are not Intel's). oneDNN, which torch also bundles
(its compiler's CPU backend calls it through ``torch.ops.mkldnn._linear_pointwise``),
generates code for the instruction set the CPU reports. Measured on a 2-core AMD
EPYC (Zen 5, AVX-512), torch 2.13, one thread:
64 rows x 64 -> 50,257 (the tiny GPT-2's output projection) 7.5 ms with MKL against
2.8 ms; SmolLM2-135M's layers at 32 rows (576 -> 1,536 and back) 0.56 against 0.30 ms.
For a few rows through a small layer oneDNN's fixed cost (~10 us per call) is more
than the product, so layers below [`MIN_MULTIPLY_ADDS`][] per call stay on torch's
path. On Intel CPUs MKL runs its own tuned code, and oneDNN pays only where MKL's
few-row path is slow (see [`mkl_is_tuned_here`][]).

How. [`onednn_linears`][] replaces the ``forward`` of a model's plain float32 CPU
``nn.Linear`` modules for the duration of one forward, then puts them back: the
user's model is unchanged outside our forwards. A patched layer falls back to
``F.linear`` when autograd is on (oneDNN's op has no backward) or the input is not
float32. Results differ from MKL's only by float rounding (both sum the same
products in another order).
"""

from __future__ import annotations

import contextlib
import functools
import platform
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

__all__ = [
    "INTEL_MIN_OUT_FEATURES",
    "INTEL_ONEDNN_ROWS",
    "LINEAR_KERNELS",
    "MIN_MULTIPLY_ADDS",
    "ROW_BUCKETS",
    "mkl_is_tuned_here",
    "onednn_linear",
    "onednn_linears",
    "onednn_pays",
    "onednn_product",
    "onednn_unavailable_reason",
    "reads_intel",
    "resolve_linear_kernel",
]

#: Values of ``AsyncTransformer(linear_kernel=...)``.
LINEAR_KERNELS = ("auto", "onednn", "torch")

#: Smallest ``rows x in_features x out_features`` sent to oneDNN (measured crossover
#: on the machine above: 576 -> 576 breaks even at 3 rows).
MIN_MULTIPLY_ADDS = 1 << 20

#: Two to seven rows go to oneDNN (padded to 8) only through layers at least this wide.
#: Through those MKL computes a few rows slowly (2 or 3 rows cost about 2 or 3 single
#: rows; profiled, much of it in MKL's copy routine ``sgemm_scopy``): a SmolLM2
#: forward of 2 to 6 rows over one cached past took 93-126 ms with them on MKL, 78-93
#: ms padded to 8 on oneDNN (one row: 62-65 ms either way). Its output projection
#: alone, microseconds for MKL against oneDNN's 8 padded rows: 22,158 / 33,734 /
#: 16,318 at 2, 3 and 4 rows against 6,854 / 6,776 / 6,726. Through narrow layers MKL
#: stays faster: the tiny GPT-2's 64 -> 50,257 at 2 rows took 508 us against 1,267.
FEW_ROWS_MIN_IN_FEATURES = 256


#: The row counts oneDNN is called with. Why: torch keeps an LRU cache of oneDNN
#: primitives (ideep's, 1,024 entries unless ``LRU_CACHE_CAPACITY`` was set before
#: its first use), one per input shape, each holding its generated code: measured
#: ~0.7 MiB per entry (300 distinct row counts through SmolLM2's layer shapes added
#: ~550 MiB; its SIS benchmark +45 MiB, still growing). With these buckets a model adds at most
#: ``len(ROW_BUCKETS)`` entries per weight shape. Padding costs at most 2x on a
#: call of 9 rows. Two to seven rows are padded to 8 in wide layers (see
#: [`FEW_ROWS_MIN_IN_FEATURES`][]); one row stays on torch, whose matrix-vector
#: product is as fast (SmolLM2's 576 -> 1,536: 71 us against oneDNN's 132 padded).
ROW_BUCKETS = (8, 16, 32, 64)


def _op() -> Any:
    return torch.ops.mkldnn._linear_pointwise


@functools.cache
def onednn_unavailable_reason() -> str:
    """Why oneDNN linears cannot run in this torch build ("" when they can).

    Checked once: the op exists, oneDNN is enabled, and a small product with bias
    matches ``F.linear``.
    """
    if not torch.backends.mkldnn.is_available():
        return "this torch build has no oneDNN (torch.backends.mkldnn.is_available() is False)"
    try:
        op = _op()
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(5, 33, generator=gen)
        weight = torch.randn(17, 33, generator=gen)
        bias = torch.randn(17, generator=gen)
        with torch.no_grad():
            got = op(x, weight, bias, "none", [], "")
            want = F.linear(x, weight, bias)
    except Exception as exc:  # noqa: BLE001 - any failure means: not usable here
        return f"torch.ops.mkldnn._linear_pointwise failed ({type(exc).__name__}: {exc})"
    if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-4, atol=1e-4):
        return "torch.ops.mkldnn._linear_pointwise disagrees with F.linear on a probe"
    return ""


def resolve_linear_kernel(choice: str, device: torch.device, dtype: torch.dtype) -> str:
    """``"onednn"`` or ``"torch"`` for a model on ``device`` with weights of ``dtype``.

    Args:
        choice: ``"auto"`` (oneDNN for float32 CPU models when this torch has it),
            ``"onednn"`` (the same, but an error when it cannot be used) or ``"torch"``.
        device: Where the model's weights are.
        dtype: Their dtype.

    Raises:
        ValueError: ``choice`` is none of [`LINEAR_KERNELS`][], or ``"onednn"`` was
            asked for where it cannot run.
    """
    if choice not in LINEAR_KERNELS:
        raise ValueError(f"linear_kernel must be one of {LINEAR_KERNELS}, got {choice!r}")
    if choice == "torch":
        return "torch"
    if device.type != "cpu":
        why = f"the model is on {device.type}, oneDNN linears are for CPU models"
    elif dtype != torch.float32:
        why = f"the model's weights are {dtype}, oneDNN linears are used for float32 only"
    else:
        why = onednn_unavailable_reason()
    if not why:
        return "onednn"
    if choice == "onednn":
        raise ValueError(f"linear_kernel='onednn' cannot be used: {why}; pass 'auto' or 'torch'")
    return "torch"


#: On an Intel CPU, the row counts and the smallest output width (a vocabulary
#: projection from at least [`FEW_ROWS_MIN_IN_FEATURES`][] inputs) where oneDNN still
#: pays: MKL's few-row path (its packing copy) is slow there too. Measured on a
#: 2-core Xeon (AVX-512), torch 2.13, one thread, microseconds MKL / oneDNN: SmolLM2's
#: head 576 -> 49,152 at 2, 4, 8, 12, 16 and 32 rows 9,938 / 17,134, 21,855 / 19,394,
#: 34,844 / 18,762, 48,795 / 21,891, 23,197 / 21,808, 26,411 / 22,465; its 576 -> 1,536
#: layer at 2, 8 and 32 rows 132 / 348, 361 / 367, 572 / 635; the tiny Llama's head
#: 64 -> 49,152 at 8 and 32 rows 1,074 / 995, 1,936 / 1,904 (oneDNN in blocks of
#: columns, as the head is projected: 2-3x slower there).
INTEL_ONEDNN_ROWS = range(4, 13)
INTEL_MIN_OUT_FEATURES = 16_384


@functools.cache
def mkl_is_tuned_here() -> bool:
    """Whether this is an Intel x86 CPU, where MKL (torch's x86 BLAS) runs its tuned code.

    Read once, by [`reads_intel`][].
    """
    return reads_intel("/proc/cpuinfo")


def reads_intel(cpuinfo: str) -> bool:
    """Whether the ``vendor_id`` in the file ``cpuinfo`` (Linux's ``/proc/cpuinfo``) is Intel's.

    Without that file or field, ``platform.processor()`` (Windows names the vendor
    there); elsewhere False: the rule measured on AMD applies.
    """
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as info:
            for line in info:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip() == "GenuineIntel"
    except OSError:
        pass
    return "GenuineIntel" in platform.processor()


def onednn_pays(rows: int, width: int, out_features: int, *, mkl_tuned: bool | None = None) -> bool:
    """Whether ``rows`` float32 rows through a ``width -> out_features`` layer go to oneDNN.

    Where it is faster: see [`MIN_MULTIPLY_ADDS`][] and [`FEW_ROWS_MIN_IN_FEATURES`][];
    on Intel CPUs (``mkl_tuned``, default [`mkl_is_tuned_here`][]) only
    vocabulary projections at [`INTEL_ONEDNN_ROWS`][].
    """
    if rows * width * out_features < MIN_MULTIPLY_ADDS or rows < 2:
        return False
    tuned = mkl_is_tuned_here() if mkl_tuned is None else mkl_tuned
    if tuned:
        return _intel_may_pay(width, out_features) and rows in INTEL_ONEDNN_ROWS
    return rows >= ROW_BUCKETS[0] or width >= FEW_ROWS_MIN_IN_FEATURES


def _intel_may_pay(width: int, out_features: int) -> bool:
    return width >= FEW_ROWS_MIN_IN_FEATURES and out_features >= INTEL_MIN_OUT_FEATURES


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` through oneDNN when it pays, else through torch."""
    width = x.shape[-1]
    rows = x.numel() // width if width else 0
    if (
        torch.is_grad_enabled()
        or x.dtype != torch.float32
        or not onednn_pays(rows, width, weight.shape[0])
    ):
        return F.linear(x, weight, bias)
    return onednn_product(x, weight, bias)


def onednn_product(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` of float32 ``x`` by oneDNN, whatever it costs.

    oneDNN sees only the row counts of [`ROW_BUCKETS`][]: fewer rows are padded up to
    the next bucket, more are computed in tiles of the largest (see there why).
    """
    width = x.shape[-1]
    rows = x.numel() // width if width else 0
    flat = x.reshape(rows, width)
    tile = ROW_BUCKETS[-1]
    if rows <= tile:
        out = _bucketed(flat, weight, bias)
    else:
        out = flat.new_empty((rows, weight.shape[0]))
        for start in range(0, rows, tile):
            out[start : start + tile] = _bucketed(flat[start : start + tile], weight, bias)
    return out.view(*x.shape[:-1], weight.shape[0])


def _bucketed(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """The oneDNN product of at most ``ROW_BUCKETS[-1]`` rows, padded to a bucket."""
    rows = x.shape[0]
    bucket = next(b for b in ROW_BUCKETS if b >= rows)
    if bucket != rows:
        padded = x.new_zeros((bucket, x.shape[1]))
        padded[:rows] = x
        x = padded
    return _op()(x, weight, bias, "none", [], "")[:rows]


def _patched_forward(module: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return onednn_linear(x, module.weight, module.bias)


def _patchable(module: torch.nn.Module) -> bool:
    """A plain float32 CPU ``nn.Linear`` whose forward nobody else hooks or replaces.

    On Intel CPUs, only layers where oneDNN can pay (see [`onednn_pays`][]).
    """
    return (
        type(module) is torch.nn.Linear
        and (not mkl_is_tuned_here() or _intel_may_pay(module.in_features, module.out_features))
        and module.weight.dtype == torch.float32
        and module.weight.device.type == "cpu"
        and (module.bias is None or module.bias.dtype == torch.float32)
        and not module._forward_hooks
        and not module._forward_pre_hooks
        and "forward" not in vars(module)
    )


@contextlib.contextmanager
def onednn_linears(model: torch.nn.Module) -> Iterator[int]:
    """During the block, run ``model``'s plain float32 CPU linear layers through oneDNN.

    Layers with hooks or an already replaced ``forward`` (the output head while
    `genlm_hf._forward` projects it in blocks) are left alone.

    Args:
        model: Any module; its submodules are walked on entry (LoRA wrappers keep a
            plain ``base_layer``, which is patched like any other layer).

    Yields:
        How many layers were patched.
    """
    patched = [m for m in model.modules() if _patchable(m)]
    for module in patched:
        module.forward = functools.partial(_patched_forward, module)
    try:
        yield len(patched)
    finally:
        for module in patched:
            del module.forward

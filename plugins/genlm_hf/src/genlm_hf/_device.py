"""What changes when the model is on a GPU: host-to-device copies and memory budgets.

* **Copies without a host synchronisation.** A batch's token ids, masks and gather
  indices are built on the host. A plain ``tensor.to("cuda")`` from pageable memory
  waits for the GPU to finish the work queued before it (``torch.cuda.set_sync_debug_mode``
  reports it); copied from page-locked memory with ``non_blocking=True`` it is only
  queued. torch's caching host allocator keeps the page-locked block until the copy
  has run, so the source may be dropped at once.
* **Batches as large as a sampler's step** ([`GPU_BATCH_SIZE`][]).
* **Budgets in proportion to the device.** The CPU defaults (1 GiB of keys and values,
  256 MiB per forward, 8 MiB temporaries) would make a GPU evict what a sampler needs
  and split its batches: an 8B Llama's 256 particles x 50 tokens are 1.7 GB of keys and
  values. On CUDA the defaults are fractions of the memory free when the model is
  wrapped (see [`default_budgets`][]).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from genlm_backend_kit import DEFAULT_KV_CACHE_BYTES, DEFAULT_MAX_BATCH_KV_BYTES

__all__ = [
    "CPU_COPY_BYTES",
    "GPU_BATCH_SIZE",
    "default_budgets",
    "index_on",
    "split_kv_budget",
    "to_device",
]

#: Largest temporary copy the batched gather/store paths may make on a CPU (bytes);
#: bigger batches go row by row (or run by run), so a forward's working memory stays small.
CPU_COPY_BYTES = 8 << 20
#: Share of the GPU memory free at construction given to the prefix K/V cache by default.
GPU_KV_SHARE = 0.3
#: Default ``batch_size`` of a model on CUDA. Every forward reads all the weights and
#: pays the per-layer launch costs (on an H100, an 8B model's 256-particle step in
#: batches of 64, the CPU default, was four forwards: 40.8 ms of kernels, ~10 ms each).
GPU_BATCH_SIZE = 512


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` (on the host) on ``device``, queued without a host synchronisation on CUDA."""
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def index_on(values: Sequence[int], device: torch.device) -> torch.Tensor:
    """A long tensor of ``values`` on ``device`` (see [`to_device`][])."""
    return to_device(torch.tensor(values, dtype=torch.long), device)


def default_budgets(
    device: torch.device, kv_cache_bytes: int | None, max_batch_kv_bytes: int | None
) -> tuple[int, int, int]:
    """``(kv_cache_bytes, max_batch_kv_bytes, copy_bytes)`` for a model on ``device``.

    Given values are kept. On a CPU the defaults are genlm-core's constants and
    temporaries stay under [`CPU_COPY_BYTES`][]. On CUDA: [`GPU_KV_SHARE`][] of the
    free memory for the K/V cache (at least the CPU default), a quarter of that per
    forward, and temporaries as large as one forward's K/V buffer (device memory is
    not the host heap this cap protects).
    """
    kv, batch = kv_cache_bytes, max_batch_kv_bytes
    if device.type != "cuda":
        kv = DEFAULT_KV_CACHE_BYTES if kv is None else kv
        batch = DEFAULT_MAX_BATCH_KV_BYTES if batch is None else batch
        return kv, batch, CPU_COPY_BYTES
    if kv is None:
        free, _ = torch.cuda.mem_get_info(device)
        kv = max(DEFAULT_KV_CACHE_BYTES, int(GPU_KV_SHARE * free))
    if batch is None:
        batch = max(DEFAULT_MAX_BATCH_KV_BYTES, kv // 4)
    return kv, batch, max(CPU_COPY_BYTES, batch)


def split_kv_budget(
    kv_cache_bytes: int, max_batch_kv_bytes: int, *, on_gpu: bool = False
) -> tuple[int, int]:
    """Split ``kv_cache_bytes`` into (reused forward K/V buffer, working-memory reserve).

    The prefix cache gets the rest. The reserve (a quarter of the budget, at most
    64 MiB) stands for what a forward allocates besides keys and values: logits,
    log-probs, activations, and allocator slack between heap trims. Measured on
    SmolLM2 with 32-row batches, that is ~35 MiB at peak plus ~17 MiB of bookkeeping;
    without the reserve a 256 MiB budget peaked ~35 MiB above it.

    On a GPU (``on_gpu``) the kept buffer may be one forward's whole K/V buffer (at
    most a quarter of the budget), and so may the past-gather temporary kept beside it
    (the model keeps both, and the prefix cache gets what is left): a sampler's batch
    grows by a token a step, and a fresh buffer each step would never fit the blocks
    torch's caching allocator holds, so it would map new device memory every step.
    """
    cap = kv_cache_bytes // 4 if on_gpu else min(64 << 20, kv_cache_bytes // 4)
    keep = min(max_batch_kv_bytes, cap)
    reserve = min(64 << 20, kv_cache_bytes // 4)
    return keep, reserve

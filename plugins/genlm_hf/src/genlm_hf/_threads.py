"""How many torch threads the backend's worker thread uses, without touching any other thread.

Why it matters. Forwards run in the batcher's worker thread while the caller's event
loop thread runs its own torch code (a sampler masking and normalising each
particle's log-probs). When both threads run multi-threaded torch, two OpenMP teams
share the cores; libgomp then stops its idle threads from spinning, so every parallel
torch operation in *either* thread pays a thread wake-up. Measured on a 2-core CPU
with the tiny GPT-2: a sampler's per-particle step took 177 us instead of 94 us, and
the forward gained nothing from its second thread. For a model that small a
single-threaded worker is faster end to end; for a real model (SmolLM2-135M) the
forward dominates and keeps every thread.

``torch.set_num_threads`` sets the calling thread's OpenMP and MKL thread counts, and
also the default that threads which have not used torch yet will pick up.
[`set_thread_torch_threads`][] puts that default back from a short-lived helper
thread, so only the calling thread changes.
"""

from __future__ import annotations

import threading

import torch

__all__ = ["SMALL_MODEL_PARAMETERS", "auto_worker_threads", "set_thread_torch_threads"]

#: Models with fewer parameters run their worker thread single-threaded on a CPU
#: (``worker_threads=None``): their operations are too small to gain from threads.
SMALL_MODEL_PARAMETERS = 20_000_000


def auto_worker_threads(model: torch.nn.Module, device: torch.device) -> int | None:
    """The worker's torch threads for ``model``: 1 for a small CPU model, else None (leave)."""
    if device.type != "cpu":
        return None
    n_params = sum(p.numel() for p in model.parameters())
    return 1 if n_params < SMALL_MODEL_PARAMETERS else None


def set_thread_torch_threads(n: int) -> None:
    """Make torch operations of the calling thread use ``n`` threads; no other thread changes."""
    before = torch.get_num_threads()  # also settles this thread's own setting first
    if n == before:
        return
    torch.set_num_threads(n)
    restore = threading.Thread(
        target=torch.set_num_threads, args=(before,), name="genlm-hf-restore-torch-threads"
    )
    restore.start()
    restore.join()

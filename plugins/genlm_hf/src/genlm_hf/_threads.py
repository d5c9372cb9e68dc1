"""How many torch threads the worker thread and the caller's thread use, each on its own.

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

The other way round matters as much. A forward of SmolLM2-135M in a multi-threaded
worker took 62-68 ms for 4 and 8 rows while no other thread had run parallel torch
work, and 76-98 ms once the main thread had (loading the model is enough): libgomp
counts the idle threads of every thread's pool, and with more than the cores it
stops the worker's threads from spinning between the forward's parallel
operations. Setting the main thread to one torch thread afterwards does not help (its
pool's threads stay); ending that pool does ([`leave_cores_to_worker`][]). An idle
pool of another model's worker thread does the same (forwards of 3 to 10 rows
40-50% slower beside one other idle model), so a multi-threaded worker holds its
threads during its batches only ([`BatchOnlyThreads`][]).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import threading
from collections.abc import Iterator

import torch

__all__ = [
    "SMALL_MODEL_PARAMETERS",
    "BatchOnlyThreads",
    "auto_worker_threads",
    "batch_only_threads",
    "default_torch_threads",
    "end_openmp_pool",
    "leave_cores_to_worker",
    "multi_threaded_cpu_worker",
    "openmp_threads",
    "set_caller_threads",
    "set_thread_torch_threads",
    "usable_cpus",
]

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


def default_torch_threads() -> int:
    """The torch threads a thread started now gets (another thread's setting may differ)."""
    seen: list[int] = []
    probe = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    probe.start()
    probe.join()
    return seen[0]


def leave_cores_to_worker() -> bool:
    """Give the calling thread one torch thread and end its pool of idle OpenMP threads.

    For the thread whose event loop calls a model with a multi-threaded worker on a
    CPU (see the module's docstring): that thread's own torch work (masking and
    normalising rows) then runs single-threaded, and the worker's forwards no
    longer pay a thread wake-up per parallel operation (MKL's products in that
    thread start no pool again either: measured). Other threads keep their
    setting; threads started later get torch's default.

    Returns:
        Whether the pool could be ended: True with GNU OpenMP (libgomp, which
        torch's Linux wheels bundle); False elsewhere, where only the thread
        counts change.
    """
    set_thread_torch_threads(1)
    return end_openmp_pool()


def end_openmp_pool() -> bool:
    """End the calling thread's pool of idle OpenMP threads (its next parallel op starts one).

    Ending and restarting a pool cost about 55 us on the 2-core CPU measured.
    Returns whether the pool could be ended (libgomp only).
    """
    gomp = _libgomp()
    if gomp is None or not hasattr(gomp, "omp_pause_resource_all"):  # libgomp < GCC 9
        return False
    # OpenMP 5.0; libgomp ends the calling thread's pool only (gomp_pause_host). Other
    # runtimes pause all threads, so they are never called (see `_libgomp`).
    return gomp.omp_pause_resource_all(1) == 0  # 1: omp_pause_soft


def openmp_threads() -> int | None:
    """The calling thread's OpenMP thread count (torch's libgomp), or None where unknown."""
    gomp = _libgomp()
    return None if gomp is None else int(gomp.omp_get_max_threads())


def set_openmp_threads(n: int) -> None:
    """Set the calling thread's OpenMP thread count only (torch reads it per thread).

    Unlike ``torch.set_num_threads``, no process-wide default changes, so no helper
    thread is needed: a call costs microseconds. Only where [`openmp_threads`][]
    is known.
    """
    gomp = _libgomp()
    assert gomp is not None
    gomp.omp_set_num_threads(n)


class BatchOnlyThreads:
    """OpenMP threads for a model's batches only: none held between them.

    A batch runs with ``threads`` in whichever thread runs it (the worker, or a
    sync caller's own thread); after it, that thread's pool is ended and its own
    count put back. The worker's own count is 1, so between batches an idle model
    slows no other thread's parallel work (see the module's docstring), and the
    core's small work on a batch's rows, after the backend's, starts no pool again.

    Args:
        threads: OpenMP threads a batch runs with.
    """

    def __init__(self, threads: int) -> None:
        self.threads = threads

    def adopt(self) -> None:
        """Make the calling thread (the worker) single-threaded outside batches."""
        torch.get_num_threads()  # settles torch's own per-thread setting first
        if openmp_threads() is not None:
            set_openmp_threads(1)
            end_openmp_pool()

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Around one batch: [`threads`][] for it; then the pool ended, the count put back."""
        before = openmp_threads()
        if before is None:
            yield
            return
        set_openmp_threads(self.threads)
        try:
            yield
        finally:
            end_openmp_pool()
            set_openmp_threads(before)


@functools.cache
def _libgomp() -> ctypes.CDLL | None:
    """The CPU library of torch if its OpenMP runtime is GNU's (libgomp), else None.

    Its symbols resolve through its own dependencies, so ``omp_*`` are those of the
    runtime torch uses (a process often holds several: sentencepiece ships its own
    libgomp). None on other systems and runtimes (LLVM's or Intel's, whose pause
    is process-wide).
    """
    path = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    try:
        torch_cpu = ctypes.CDLL(path)  # already loaded: the same library, not a second copy
        libc = ctypes.CDLL(None)
        info = _DlInfo()
        address = ctypes.cast(torch_cpu.omp_get_max_threads, ctypes.c_void_p)
        if not libc.dladdr(address, ctypes.byref(info)) or not info.dli_fname:
            return None
    except (OSError, AttributeError):  # not Linux; a torch laid out otherwise or without OpenMP
        return None
    return torch_cpu if os.path.basename(info.dli_fname).startswith(b"libgomp") else None


class _DlInfo(ctypes.Structure):
    """glibc's ``Dl_info``: which shared object defines an address."""

    _fields_ = (
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    )


def set_caller_threads(caller: int | None, multi_threaded_worker: bool) -> None:
    """Apply `AsyncTransformer`'s ``caller_threads`` to the calling thread.

    ``multi_threaded_worker``: the model's worker runs parallel CPU forwards (it has
    [`BatchOnlyThreads`][]); only then does ``None`` leave the cores to it.
    """
    if caller is None:
        if multi_threaded_worker:
            leave_cores_to_worker()
    elif caller == 1:
        leave_cores_to_worker()
    else:
        set_thread_torch_threads(caller)


def batch_only_threads(worker: int | None, device: torch.device) -> BatchOnlyThreads | None:
    """A model's [`BatchOnlyThreads`][] where its worker runs multi-threaded on a CPU."""
    if not multi_threaded_cpu_worker(worker, device):
        return None
    return BatchOnlyThreads(worker or default_torch_threads())


def multi_threaded_cpu_worker(worker: int | None, device: torch.device) -> bool:
    """Whether a model on ``device`` with ``worker_threads=worker`` runs parallel CPU forwards."""
    return device.type == "cpu" and worker != 1 and usable_cpus() > 1


def usable_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1

"""Cheap hardware and package probes for availability checks: no engine, no CUDA init.

The GPU count asks the NVIDIA driver (NVML) through ctypes, as ``nvidia-smi`` does, and
applies ``CUDA_VISIBLE_DEVICES`` as CUDA does. Standard library only: the noxfile
loads this module by path.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import platform

__all__ = [
    "VISIBLE_DEVICES",
    "has_nvidia_gpu",
    "is_apple_silicon",
    "module_available",
    "nvidia_gpu_count",
    "visible_gpu_count",
]

#: The variable CUDA reads to choose the GPUs a process sees.
VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"


def nvidia_gpu_count() -> tuple[int, str]:
    """Number of NVIDIA GPUs this process can use, and a reason when it is 0.

    The driver's count, as ``CUDA_VISIBLE_DEVICES`` (read on every call) restricts it:
    ``""`` or ``"-1"`` hide every GPU, and that is the reason given.
    """
    visible = os.environ.get(VISIBLE_DEVICES)
    if visible is not None and visible.strip() in ("", "-1"):
        return 0, f"{VISIBLE_DEVICES}={visible!r} hides every GPU"
    count, reason = driver_gpu_count()
    if not count:
        return 0, reason
    return visible_gpu_count(count, visible)


def visible_gpu_count(driver_count: int, visible: str | None) -> tuple[int, str]:
    """How many of ``driver_count`` GPUs ``CUDA_VISIBLE_DEVICES=visible`` leaves, and why 0.

    As CUDA reads it: a comma-separated list of indices or ``GPU-``/``MIG-`` UUIDs, cut
    at the first entry that is not one (``-1``, an index out of range, a repeat).
    UUIDs are taken to name a present GPU (checking them needs more than a count).
    """
    if visible is None:
        return driver_count, ""
    seen: list[str] = []
    for item in (i.strip() for i in visible.split(",")):
        if item.isdigit():
            if int(item) >= driver_count:
                break
        elif not item.startswith(("GPU-", "MIG-")):
            break
        if item in seen:
            break
        seen.append(item)
    count = min(len(seen), driver_count)
    if count:
        return count, ""
    return 0, (
        f"{VISIBLE_DEVICES}={visible!r} names none of the {driver_count} GPU"
        f"{'s' if driver_count != 1 else ''} the NVIDIA driver reports"
    )


@functools.cache  # the driver's answer does not change while the process runs
def driver_gpu_count() -> tuple[int, str]:
    """Number of NVIDIA GPUs the driver reports (all of them), and a reason when it is 0."""
    for lib in ("libnvidia-ml.so.1", "libnvidia-ml.so", "nvml.dll"):
        try:
            nvml = ctypes.CDLL(lib)
            break
        except OSError:
            continue
    else:
        return 0, "no NVIDIA driver found (libnvidia-ml could not be loaded)"
    try:
        if nvml.nvmlInit_v2() != 0:
            return 0, "the NVIDIA driver is present but NVML failed to initialise"
        count = ctypes.c_uint(0)
        rc = nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
        nvml.nvmlShutdown()
    except AttributeError:
        return 0, "the NVIDIA driver library lacks NVML entry points"
    if rc != 0 or count.value == 0:
        return 0, "the NVIDIA driver reports no GPU"
    return count.value, ""


def has_nvidia_gpu() -> bool:
    """True when this process can use an NVIDIA GPU (see `nvidia_gpu_count`)."""
    return nvidia_gpu_count()[0] > 0


def is_apple_silicon() -> bool:
    """True on macOS running on an Apple silicon (arm64) processor."""
    return platform.system() == "Darwin" and platform.machine() == "arm64"


def module_available(name: str) -> bool:
    """True when ``name`` can be imported, checked without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False

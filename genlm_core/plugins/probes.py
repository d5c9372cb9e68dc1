"""Cheap hardware and package probes for availability checks.

None of these import an engine or initialise CUDA: ``has_nvidia_gpu`` asks the
NVIDIA driver (NVML) directly through ctypes, the way ``nvidia-smi`` does.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import platform

__all__ = ["has_nvidia_gpu", "is_apple_silicon", "module_available", "nvidia_gpu_count"]


@functools.cache
def nvidia_gpu_count() -> tuple[int, str]:
    """Number of NVIDIA GPUs the driver reports, and a reason when it is 0."""
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
    """True when NVML reports at least one NVIDIA GPU."""
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

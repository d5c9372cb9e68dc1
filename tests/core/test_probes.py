"""The GPU probe tells what an engine in this process would see: CUDA_VISIBLE_DEVICES counts.

The NVIDIA driver is faked at its ctypes boundary (``CDLL("libnvidia-ml.so.1")``), so
the real probe code runs; ``CUDA_VISIBLE_DEVICES`` is then applied as CUDA applies it.
"""

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

from genlm_core.plugins import has_nvidia_gpu, probes
from genlm_core.plugins.probes import nvidia_gpu_count

PROBES_PY = Path(probes.__file__)


class FakeNVML:
    """The three NVML entry points the probe calls, reporting ``count`` GPUs."""

    def __init__(self, count):
        self.count = count

    def nvmlInit_v2(self):  # noqa: N802 - NVML's names
        return 0

    def nvmlDeviceGetCount_v2(self, ref):  # noqa: N802
        ref._obj.value = self.count
        return 0

    def nvmlShutdown(self):  # noqa: N802
        return 0


def _clear_caches():
    for name in ("nvidia_gpu_count", "driver_gpu_count"):
        cache_clear = getattr(getattr(probes, name, None), "cache_clear", None)
        if cache_clear is not None:
            cache_clear()


@pytest.fixture
def two_gpus(monkeypatch):
    """A driver that reports two GPUs; no CUDA_VISIBLE_DEVICES unless a test sets it."""
    real = ctypes.CDLL

    def cdll(name, *args, **kwargs):
        if "nvidia-ml" in name or name == "nvml.dll":
            return FakeNVML(2)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(probes.ctypes, "CDLL", cdll)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    _clear_caches()
    yield
    _clear_caches()


def test_without_the_variable_every_gpu_of_the_driver_counts(two_gpus):
    assert nvidia_gpu_count() == (2, "")
    assert has_nvidia_gpu()


@pytest.mark.parametrize("value", ["", "-1", " -1 "])
def test_hidden_gpus_are_no_gpu_and_that_is_the_reason(two_gpus, monkeypatch, value):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert nvidia_gpu_count() == (0, f"CUDA_VISIBLE_DEVICES={value!r} hides every GPU")
    assert not has_nvidia_gpu()


@pytest.mark.parametrize(
    "value, count",
    [
        ("1", 1),
        ("0,1", 2),
        ("1,0", 2),
        ("0,5,1", 1),  # CUDA stops at the first index out of range
        ("0,-1,1", 1),  # and at -1
        ("0,0", 1),  # and at a repeat
        ("GPU-8f6a1c2e", 1),  # a UUID names one device
    ],
)
def test_the_variable_restricts_the_count_as_cuda_does(two_gpus, monkeypatch, value, count):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert nvidia_gpu_count() == (count, "")


def test_a_variable_naming_no_present_gpu_says_so(two_gpus, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    assert nvidia_gpu_count() == (
        0,
        "CUDA_VISIBLE_DEVICES='7' names none of the 2 GPUs the NVIDIA driver reports",
    )


def test_the_variable_is_read_on_every_call(two_gpus, monkeypatch):
    assert nvidia_gpu_count()[0] == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert nvidia_gpu_count()[0] == 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert nvidia_gpu_count()[0] == 1


def test_the_probes_module_needs_only_the_standard_library():
    """The noxfile loads it by path, from an environment without genlm-core or pluggy."""
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('p', {str(PROBES_PY)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "print(m.nvidia_gpu_count())\n"
    )
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "-1"}
    out = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip() == "(0, \"CUDA_VISIBLE_DEVICES='-1' hides every GPU\")"

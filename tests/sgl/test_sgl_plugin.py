"""The genlm-sgl distribution: discovery, availability probe, and its import weight."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest
from session_requires import require

genlm_sgl = require("genlm_sgl", reason="genlm-sgl is not installed (nox -s sgl installs it)")

from genlm_core import BackendUnavailableError, load_model_by_name  # noqa: E402
from genlm_core.plugins import module_available, official  # noqa: E402
from genlm_core.plugins.probes import nvidia_gpu_count  # noqa: E402
from genlm_sgl import _plugin  # noqa: E402

NO_DRIVER = "no NVIDIA driver found (libnvidia-ml could not be loaded)"
#: The probe's reason without sglang, on a Linux x86_64 machine with and without a GPU.
NOT_INSTALLED = {
    "gpu": "sglang is not installed: pip install 'genlm-sgl[cuda]'",
    "cpu": "sglang is not installed: pip install 'genlm-sgl[cpu]' && pip install --no-deps "
    "sglang==0.5.23 (no NVIDIA GPU: SGLang's CPU path, used only when named; its [cuda] extra "
    "would replace the CPU torch. sglang also imports torchvision and sgl_kernel, which have "
    "no CPU build on PyPI: see genlm-sgl's README, 'On a CPU')",
}


def _fake(monkeypatch, present: set[str], gpus: int = 0) -> None:
    """A Linux x86_64 machine with ``gpus`` GPUs; install commands name PyPI distributions."""
    monkeypatch.setattr(_plugin, "module_available", lambda name: name in present)
    monkeypatch.setattr(_plugin, "nvidia_gpu_count", lambda: (gpus, "" if gpus else NO_DRIVER))
    host = official.Host(gpus=gpus, system="Linux", machine="x86_64")
    monkeypatch.setattr(official.Host, "here", classmethod(lambda cls: host))
    monkeypatch.setattr(official, "_checkout_plugins", lambda: None)


def test_discovered_through_entry_point(installed_backends):
    reg = installed_backends["sgl"]
    assert (reg.plugin, reg.distribution, reg.version) == ("sgl", "genlm-sgl", "0.1.0")
    assert reg.spec.priority == 90
    assert reg.spec.auto == (nvidia_gpu_count()[0] > 0)  # automatic on NVIDIA GPUs only
    assert reg.spec.loader == "genlm_sgl.lm:AsyncSGLTransformer.from_name"
    (ep,) = importlib.metadata.entry_points(group="genlm.backends", name="sgl")
    assert ep.value == "genlm_sgl._plugin"


def test_probe_on_this_machine(installed_backends):
    avail = installed_backends["sgl"].availability()
    gpus, _ = nvidia_gpu_count()
    if not module_available("sglang"):
        assert avail.reason.startswith("sglang is not installed: pip install ")
    elif gpus:
        assert avail.ok and avail.reason.startswith("CUDA")
    else:
        assert avail == _plugin.Availability.yes(_plugin.CPU_NOTE)


@pytest.mark.parametrize("gpus, machine", [(2, "gpu"), (0, "cpu")])
def test_probe_without_sglang(monkeypatch, gpus, machine):
    _fake(monkeypatch, set(), gpus=gpus)
    assert _plugin.check() == _plugin.Availability.no(NOT_INSTALLED[machine])
    specs = []
    _plugin.genlm_register_backends(register=specs.append)
    assert specs[0].install_hint == NOT_INSTALLED[machine].removeprefix("sglang is not installed: ")


def test_probe_on_cpu_is_available_when_named(monkeypatch):
    _fake(monkeypatch, {"sglang"}, gpus=0)
    assert _plugin.check() == _plugin.Availability.yes(
        "CPU (SGLang's torch-native path; used only when named)"
    )
    specs = []
    _plugin.genlm_register_backends(register=specs.append)
    assert specs[0].auto is False


def test_probe_on_gpus_is_automatic(monkeypatch):
    _fake(monkeypatch, {"sglang"}, gpus=2)
    assert _plugin.check() == _plugin.Availability.yes("CUDA, 2 NVIDIA GPUs")
    specs = []
    _plugin.genlm_register_backends(register=specs.append)
    assert specs[0].auto is True


def test_load_model_by_name_names_the_reason(monkeypatch):
    _fake(monkeypatch, set(), gpus=0)
    with pytest.raises(BackendUnavailableError) as info:
        load_model_by_name("gpt2", backend="sgl")
    assert "backend 'sgl' (genlm-sgl 0.1.0) is installed but unavailable here" in str(info.value)
    assert "sglang is not installed" in str(info.value)


def test_plugin_imports_no_engine():
    code = (
        "import sys\n"
        "import genlm_sgl._plugin as p\n"
        "specs = []\n"
        "p.genlm_register_backends(register=specs.append)\n"
        "specs[0].availability()\n"
        "import genlm_sgl\n"
        "heavy = [m for m in ('sglang', 'torch', 'genlm_sgl.lm') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr

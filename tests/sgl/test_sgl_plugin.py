"""The genlm-sgl distribution: discovery, availability probe, and its import weight."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest

genlm_sgl = pytest.importorskip(
    "genlm_sgl", reason="genlm-sgl is not installed (nox -s sgl installs it)"
)

from genlm_core import BackendUnavailableError, load_model_by_name  # noqa: E402
from genlm_core.plugins import module_available  # noqa: E402
from genlm_core.plugins.probes import nvidia_gpu_count  # noqa: E402
from genlm_sgl import _plugin  # noqa: E402

DEV_REASON = "genlm-sgl 0.1.0 does not ship its model class yet (backend under development)"
NO_DRIVER = "no NVIDIA driver found (libnvidia-ml could not be loaded)"


def _fake(monkeypatch, present: set[str], gpus: int = 0) -> None:
    monkeypatch.setattr(_plugin, "module_available", lambda name: name in present)
    monkeypatch.setattr(_plugin, "nvidia_gpu_count", lambda: (gpus, "" if gpus else NO_DRIVER))


def test_discovered_through_entry_point(installed_backends):
    reg = installed_backends["sgl"]
    assert (reg.plugin, reg.distribution, reg.version) == ("sgl", "genlm-sgl", "0.1.0")
    assert (reg.spec.priority, reg.spec.auto) == (90, True)
    assert reg.spec.loader == "genlm_sgl.lm:AsyncSGLTransformer.from_name"
    (ep,) = importlib.metadata.entry_points(group="genlm.backends", name="sgl")
    assert ep.value == "genlm_sgl._plugin"


def test_probe_on_this_machine(installed_backends):
    avail = installed_backends["sgl"].availability()
    gpus, no_gpu = nvidia_gpu_count()
    if not gpus:
        assert not avail.ok
        assert f"requires an NVIDIA GPU, but {no_gpu}" in avail.reason
    if not module_available("sglang"):
        assert not avail.ok
        assert "sglang is not installed: pip install 'genlm-sgl[cuda]'" in avail.reason
    if not module_available("genlm_sgl.lm"):
        assert not avail.ok
        assert DEV_REASON in avail.reason


def test_probe_lists_every_reason(monkeypatch):
    _fake(monkeypatch, set(), gpus=0)
    assert _plugin.check().reason == (
        f"{DEV_REASON}; requires an NVIDIA GPU, but {NO_DRIVER}; "
        "sglang is not installed: pip install 'genlm-sgl[cuda]'"
    )


def test_probe_needs_gpu_even_with_sglang(monkeypatch):
    _fake(monkeypatch, {"genlm_sgl.lm", "sglang"}, gpus=0)
    assert _plugin.check().reason == f"requires an NVIDIA GPU, but {NO_DRIVER}"


def test_probe_available(monkeypatch):
    _fake(monkeypatch, {"genlm_sgl.lm", "sglang"}, gpus=2)
    assert _plugin.check() == _plugin.Availability.yes("CUDA, 2 NVIDIA GPUs")


def test_load_model_by_name_names_the_reason(monkeypatch):
    _fake(monkeypatch, {"genlm_sgl.lm", "sglang"}, gpus=0)
    with pytest.raises(BackendUnavailableError) as info:
        load_model_by_name("gpt2", backend="sgl")
    assert "backend 'sgl' (genlm-sgl 0.1.0) is installed but unavailable here" in str(info.value)
    assert "requires an NVIDIA GPU" in str(info.value)


def test_plugin_imports_no_engine():
    code = (
        "import sys\n"
        "import genlm_sgl._plugin as p\n"
        "specs = []\n"
        "p.genlm_register_backends(register=specs.append)\n"
        "specs[0].availability()\n"
        "heavy = [m for m in ('sglang', 'torch', 'genlm_sgl.lm') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr

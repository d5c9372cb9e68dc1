"""The genlm-mlx distribution: discovery, availability probe, and its import weight."""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess
import sys

import pytest

genlm_mlx = pytest.importorskip(
    "genlm_mlx", reason="genlm-mlx is not installed (nox -s mlx installs it)"
)

from genlm_core import BackendUnavailableError, load_model_by_name  # noqa: E402
from genlm_core.plugins import is_apple_silicon, module_available  # noqa: E402
from genlm_mlx import _plugin  # noqa: E402

DEV_REASON = "genlm-mlx 0.1.0 does not ship its model class yet (backend under development)"
ENGINE = {"mlx.core", "mlx_lm"}
INSTALL = "installed: pip install genlm-mlx"


def _fake(monkeypatch, present: set[str], system: str, machine: str, runtime: str | None = None):
    monkeypatch.setattr(_plugin, "module_available", lambda name: name in present)
    monkeypatch.setattr(platform, "system", lambda: system)
    monkeypatch.setattr(platform, "machine", lambda: machine)
    monkeypatch.setattr(
        _plugin, "is_apple_silicon", lambda: (system, machine) == ("Darwin", "arm64")
    )
    monkeypatch.setattr(_plugin, "linux_runtime", lambda: runtime)


class _Dist:
    def __init__(self, name: str, version: str) -> None:
        self.metadata = {"Name": name}
        self.version = version


def test_discovered_through_entry_point(installed_backends):
    reg = installed_backends["mlx"]
    assert (reg.plugin, reg.distribution, reg.version) == ("mlx", "genlm-mlx", "0.1.0")
    assert reg.spec.priority == 80
    assert reg.spec.auto is is_apple_silicon()  # automatic on Apple silicon only
    assert reg.spec.loader == "genlm_mlx.lm:AsyncMlxLM.from_name"
    (ep,) = importlib.metadata.entry_points(group="genlm.backends", name="mlx")
    assert ep.value == "genlm_mlx._plugin"


@pytest.mark.parametrize("apple", [True, False])
def test_auto_is_decided_at_registration(monkeypatch, apple):
    monkeypatch.setattr(_plugin, "is_apple_silicon", lambda: apple)
    specs = []
    _plugin.genlm_register_backends(register=specs.append)
    assert [s.auto for s in specs] == [apple]


def test_probe_on_this_machine(installed_backends):
    avail = installed_backends["mlx"].availability()
    if not module_available("genlm_mlx.lm"):
        assert not avail.ok
        assert DEV_REASON in avail.reason
    if not module_available("mlx.core") or not module_available("mlx_lm"):
        assert not avail.ok
        assert "not installed: pip install genlm-mlx" in avail.reason


@pytest.mark.parametrize(
    "present, system, machine, runtime, expected",
    [
        (ENGINE, "Darwin", "arm64", None, DEV_REASON),
        (
            {"genlm_mlx.lm"},
            "Darwin",
            "arm64",
            None,
            f"mlx and mlx-lm are not {INSTALL}",
        ),
        (
            {"genlm_mlx.lm", "mlx.core"},
            "Linux",
            "x86_64",
            None,
            "mlx-lm is not installed: pip install genlm-mlx",
        ),
        (
            {"genlm_mlx.lm", *ENGINE},
            "Linux",
            "x86_64",
            None,
            "mlx is installed without a Linux compute library; pip install 'mlx[cpu]' "
            "(or 'mlx[cuda]' for NVIDIA GPUs)",
        ),
        (
            {"genlm_mlx.lm", *ENGINE},
            "Darwin",
            "x86_64",
            None,
            "MLX needs Apple silicon; this Mac is x86_64",
        ),
        (
            {"genlm_mlx.lm", *ENGINE},
            "Windows",
            "AMD64",
            None,
            "MLX runs on macOS (Apple silicon) and Linux, not Windows",
        ),
    ],
)
def test_probe_unavailable(monkeypatch, present, system, machine, runtime, expected):
    _fake(monkeypatch, present, system, machine, runtime)
    avail = _plugin.check()
    assert (avail.ok, avail.reason) == (False, expected)


@pytest.mark.parametrize(
    "system, machine, runtime, note",
    [
        ("Darwin", "arm64", None, "Apple silicon (Metal)"),
        (
            "Linux",
            "x86_64",
            "mlx-cpu 0.32.4",
            "Linux (mlx-cpu 0.32.4); used only when named: backend='mlx'",
        ),
    ],
)
def test_probe_available(monkeypatch, system, machine, runtime, note):
    _fake(monkeypatch, {"genlm_mlx.lm", *ENGINE}, system, machine, runtime)
    assert _plugin.check() == _plugin.Availability.yes(note)


@pytest.mark.parametrize(
    "dists, expected",
    [
        ([("mlx", "0.32.4"), ("mlx-cpu", "0.32.4")], "mlx-cpu 0.32.4"),
        ([("mlx", "0.32.4"), ("mlx_cuda_12", "0.32.4")], "mlx-cuda-12 0.32.4"),
        ([("mlx", "0.32.4"), ("mlx-lm", "0.32.2")], None),
    ],
)
def test_linux_runtime_detection(monkeypatch, dists, expected):
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: [_Dist(*d) for d in dists])
    assert _plugin.linux_runtime() == expected


def test_load_model_by_name_names_the_reason(monkeypatch):
    _fake(monkeypatch, ENGINE, "Darwin", "arm64")
    with pytest.raises(BackendUnavailableError) as info:
        load_model_by_name("mlx-community/tiny", backend="mlx")
    assert "backend 'mlx' (genlm-mlx 0.1.0) is installed but unavailable here" in str(info.value)
    assert DEV_REASON in str(info.value)


def test_plugin_imports_no_engine():
    code = (
        "import sys\n"
        "import genlm_mlx._plugin as p\n"
        "specs = []\n"
        "p.genlm_register_backends(register=specs.append)\n"
        "specs[0].availability()\n"
        "heavy = [m for m in ('mlx.core', 'mlx_lm', 'torch', 'genlm_mlx.lm') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr

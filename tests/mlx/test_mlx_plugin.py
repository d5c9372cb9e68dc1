"""The genlm-mlx distribution: discovery, availability probe, and its import weight."""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess
import sys

import pytest
from session_requires import require

genlm_mlx = require("genlm_mlx", reason="genlm-mlx is not installed (nox -s mlx installs it)")

from genlm_core import BackendUnavailableError, load_model_by_name  # noqa: E402
from genlm_core.plugins import is_apple_silicon, module_available, official  # noqa: E402
from genlm_mlx import _plugin  # noqa: E402

ENGINE = {"mlx.core", "mlx_lm"}
SLOW_BLAS = "; slow reference BLAS: pip install 'genlm-mlx[mkl]'"
INSTALL = "installed: pip install genlm-mlx"


def _fake(
    monkeypatch,
    present: set[str],
    system: str,
    machine: str,
    runtime: str | None = None,
    mkl: bool = True,
):
    monkeypatch.setattr(_plugin, "module_available", lambda name: name in present)
    monkeypatch.setattr(_plugin, "fast_blas_installed", lambda: mkl)
    monkeypatch.setattr(platform, "system", lambda: system)
    monkeypatch.setattr(platform, "machine", lambda: machine)
    monkeypatch.setattr(
        _plugin, "is_apple_silicon", lambda: (system, machine) == ("Darwin", "arm64")
    )
    monkeypatch.setattr(_plugin, "linux_runtime", lambda: runtime)
    # No GPU; install commands name PyPI distributions, not this checkout's folders.
    host = official.Host(gpus=0, system=system, machine=machine)
    monkeypatch.setattr(official.Host, "here", classmethod(lambda cls: host))
    monkeypatch.setattr(official, "_checkout_plugins", lambda: None)


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
    engine = module_available("mlx.core") and module_available("mlx_lm")
    if not engine:
        assert not avail.ok
        assert "not installed: pip install " in avail.reason
    elif platform.system() == "Linux" and _plugin.linux_runtime() is not None:
        assert avail.ok, avail.reason
        assert "used only when named: backend='mlx'" in avail.reason
        assert not installed_backends["mlx"].spec.auto


@pytest.mark.parametrize(
    "present, system, machine, runtime, expected",
    [
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
            "mlx-lm is not installed: pip install 'genlm-mlx[mkl]' (Linux x86_64: MKL's BLAS "
            "instead of mlx-cpu's slow reference BLAS)",
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
    "system, machine, runtime, mkl, note",
    [
        ("Darwin", "arm64", None, False, "Apple silicon (Metal)"),
        (
            "Linux",
            "x86_64",
            "mlx-cpu 0.32.4",
            True,
            "Linux (mlx-cpu 0.32.4); used only when named: backend='mlx'",
        ),
        (
            "Linux",
            "x86_64",
            "mlx-cpu 0.32.4",
            False,
            "Linux (mlx-cpu 0.32.4); used only when named: backend='mlx'" + SLOW_BLAS,
        ),
        (
            "Linux",
            "x86_64",
            "mlx-cuda-12 0.32.4",
            False,
            "Linux (mlx-cuda-12 0.32.4); used only when named: backend='mlx'",
        ),
    ],
)
def test_probe_available(monkeypatch, system, machine, runtime, mkl, note):
    _fake(monkeypatch, {"genlm_mlx.lm", *ENGINE}, system, machine, runtime, mkl)
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
    _fake(monkeypatch, ENGINE, "Linux", "x86_64", runtime=None)
    with pytest.raises(BackendUnavailableError) as info:
        load_model_by_name("mlx-community/tiny", backend="mlx")
    assert "backend 'mlx' (genlm-mlx 0.1.0) is installed but unavailable here" in str(info.value)
    assert "mlx is installed without a Linux compute library" in str(info.value)


def test_load_model_by_name_when_named(asset_model_dir):
    require("mlx_lm", reason="mlx and mlx-lm are not installed (nox -s mlx does)")
    if not _plugin.check().ok:
        pytest.skip(f"mlx is not available here: {_plugin.check().reason}")
    lm = load_model_by_name(str(asset_model_dir("tiny-llama-spm")), backend="mlx")
    try:
        assert type(lm).__module__ == "genlm_mlx.lm"
        assert type(lm).__name__ == "AsyncMlxLM"
        assert lm.next_token_logprobs_sync([1, 2, 3]).shape == (len(lm.byte_vocab),)
    finally:
        lm.cleanup()


def test_fast_blas_detection(monkeypatch, tmp_path):
    monkeypatch.delenv("GENLM_MLX_BLAS", raising=False)
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    monkeypatch.setattr(sys, "base_prefix", str(tmp_path))
    assert not _plugin.fast_blas_installed()
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libmkl_rt.so.3").write_bytes(b"")
    assert _plugin.fast_blas_installed()
    monkeypatch.setenv("GENLM_MLX_BLAS", "off")
    assert not _plugin.fast_blas_installed()


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

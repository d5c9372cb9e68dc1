"""The genlm-hf distribution: discovery, availability probe, and its import weight."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest
from session_requires import require

genlm_hf = require("genlm_hf", reason="genlm-hf is not installed (nox -s hf installs it)")

from genlm_core import BackendUnavailableError, load_model_by_name  # noqa: E402
from genlm_core.plugins import module_available, official  # noqa: E402
from genlm_hf import _plugin  # noqa: E402

DEV_REASON = "genlm-hf 0.1.0 does not ship its model class yet (backend under development)"


def _fake_modules(monkeypatch, present: set[str]) -> None:
    """Only ``present`` modules; install commands name PyPI distributions."""
    monkeypatch.setattr(_plugin, "module_available", lambda name: name in present)
    monkeypatch.setattr(official, "_checkout_plugins", lambda: None)


def test_discovered_through_entry_point(installed_backends):
    reg = installed_backends["hf"]
    assert (reg.plugin, reg.distribution, reg.version) == ("hf", "genlm-hf", genlm_hf.__version__)
    assert (reg.spec.priority, reg.spec.auto) == (50, True)
    assert reg.spec.loader == "genlm_hf.lm:AsyncTransformer.from_name"
    (ep,) = importlib.metadata.entry_points(group="genlm.backends", name="hf")
    assert ep.value == "genlm_hf._plugin"
    assert ep.dist.version == importlib.metadata.version("genlm-hf") == genlm_hf.__version__


def test_probe_on_this_machine(installed_backends):
    # genlm-hf ships its model class, and torch and transformers are genlm-core dependencies.
    assert module_available("genlm_hf.lm")
    avail = installed_backends["hf"].availability()
    assert avail.ok, avail.reason
    assert avail.reason in ("CPU", "CUDA")


def test_probe_without_model_class(monkeypatch):
    _fake_modules(monkeypatch, {"torch", "transformers"})
    assert _plugin.check().reason == DEV_REASON


def test_probe_without_engine(monkeypatch):
    _fake_modules(monkeypatch, {"genlm_hf.lm", "torch"})
    avail = _plugin.check()
    assert not avail.ok
    assert avail.reason == "transformers is not installed: pip install genlm-hf"
    specs = []
    _plugin.genlm_register_backends(register=specs.append)
    assert specs[0].install_hint == "pip install genlm-hf"


def test_probe_available(monkeypatch):
    _fake_modules(monkeypatch, {"genlm_hf.lm", "torch", "transformers"})
    monkeypatch.setattr(_plugin, "has_nvidia_gpu", lambda: False)
    assert _plugin.check() == _plugin.Availability.yes("CPU")


def test_load_model_by_name_names_the_reason(monkeypatch):
    _fake_modules(monkeypatch, {"torch", "transformers"})
    with pytest.raises(BackendUnavailableError) as info:
        load_model_by_name("gpt2", backend="hf")
    assert "backend 'hf' (genlm-hf 0.1.0) is installed but unavailable here" in str(info.value)
    assert DEV_REASON in str(info.value)


def test_plugin_imports_no_engine():
    code = (
        "import sys\n"
        "import genlm_hf._plugin as p\n"
        "specs = []\n"
        "p.genlm_register_backends(register=specs.append)\n"
        "specs[0].availability()\n"
        "heavy = [m for m in ('torch', 'transformers', 'genlm_hf.lm') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_model_module_imports_no_transformers():
    # `genlm backends --options hf` loads the loader to read its signature: torch (the
    # model class is a torch model's) but not transformers (~6 s), until a model loads.
    code = (
        "import sys\n"
        "import genlm_hf.lm\n"
        "assert 'transformers' not in sys.modules, 'transformers imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr

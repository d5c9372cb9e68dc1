import importlib
import subprocess
import sys

import pytest
from session_requires import require

import genlm_core
import genlm_core.errors as errors
import genlm_core.plugins as plugins

EXPECTED = [
    "AsyncLM",
    "AsyncLMBase",
    "AutoBatcher",
    "BackendContractError",
    "BackendUnavailableError",
    "BatchSizeMismatchError",
    "BatchedAsyncLM",
    "BatcherClosedError",
    "DuplicateBackendError",
    "GenlmError",
    "InvalidTokenIdsError",
    "MockAsyncLM",
    "ModelClosedError",
    "NoBackendAvailableError",
    "OutputCache",
    "PluginLoadError",
    "PrefixRequest",
    "Request",
    "Token",
    "UnknownBackendError",
    "UnknownLoraError",
    "UnsupportedTokenizerError",
    "__version__",
    "decode_vocab",
    "list_backends",
    "load_model_by_name",
    "resolve_backend",
    "InvalidArgumentError",
    "AsyncTokenCharacterTrie",
]
#: Model classes that live in backend plugins, importable from the top but not in
#: ``__all__``: the class, or a placeholder that raises the install command when used.
PLUGIN_CLASSES = {"AsyncTransformer": "genlm-hf", "AsyncVirtualLM": "genlm-vllm"}
#: The fast tries, from genlm-trie-numba: importable from the top, not in ``__all__``
#: (genlm_core.trie raises the install command without the plugin: test_trie_plugins.py).
TRIE_CLASSES = ("ParallelTokenCharacterTrie", "TokenByteTrie", "TokenCharacterTrie")


def test_all_is_pinned():
    assert sorted(genlm_core.__all__) == sorted(EXPECTED)


def test_every_export_resolves():
    for name in genlm_core.__all__:
        assert getattr(genlm_core, name) is not None


@pytest.mark.parametrize("name", sorted(PLUGIN_CLASSES))
def test_plugin_classes_resolve_or_say_what_to_install(name):
    from genlm_core.plugins.official import install_hint

    cls = getattr(genlm_core, name)
    assert cls.__name__ == name and name not in genlm_core.__all__
    package = PLUGIN_CLASSES[name].replace("-", "_")
    if cls.__module__ == "genlm_core.llm":  # a placeholder: the plugin or its engine is absent
        with pytest.raises(ImportError):
            importlib.import_module(f"{package}.lm")
        with pytest.raises(ImportError) as info:
            cls.from_name("m")
        assert str(info.value).endswith(install_hint(package.removeprefix("genlm_")))
    else:
        assert cls.__module__ == f"{package}.lm"


@pytest.mark.parametrize("name", TRIE_CLASSES)
def test_trie_classes_resolve_from_their_plugin(name):
    require("genlm_trie_numba")
    cls = getattr(genlm_core, name)
    assert cls.__name__ == name and name not in genlm_core.__all__
    assert cls.__module__.startswith("genlm_trie_numba.")


def test_errors_share_one_root_and_a_builtin():
    builtins = (KeyError, ValueError, RuntimeError, TypeError, ImportError, OSError)
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.GenlmError)
        if cls is not errors.GenlmError:
            assert issubclass(cls, builtins), name


def test_plugin_api_is_import_light():
    code = (
        "import genlm_core.plugins, sys; "
        "print('torch' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_plugins_all():
    assert {"hookimpl", "BackendSpec", "TrieSpec", "Availability"} <= set(plugins.__all__)


#: Each package's public surface, written out: a name added or dropped is a decision.
PACKAGE_SURFACES = {
    "genlm_core.lm": [
        "AsyncLM", "AsyncLMBase", "Backend", "BatchedAsyncLM", "DEFAULT_CACHE_BYTES",
        "LoraAdapter", "ModelState", "PrefixRequest", "Request", "sampling_args",
    ],
    "genlm_core.runtime": [
        "AutoBatcher", "BatcherStats", "ComputeGate", "DispatchPolicy", "HeapTrimmer",
        "LoopBatchers", "OutputCache", "RequestFailure", "RowPool", "RowPoolStats", "StackPool",
        "WorkerThread", "freeze_heap", "nbytes_of", "process_trimmer", "thaw_heap", "trim_heap",
        "trimming_wanted",
    ],
    "genlm_core.loading": [
        "DTYPES", "Option", "accepted_options", "cached_snapshot", "check_dtype",
        "describe_options", "embedded_model", "list_backends", "load_model_by_name",
        "merge_engine_options", "resolve_backend", "resolve_model_name",
    ],
    "genlm_backend_kit": [
        "DEFAULT_KV_CACHE_BYTES", "DEFAULT_MAX_BATCH_KV_BYTES", "EngineLM", "MIN_SHARED",
        "PlannedInput", "PrefixCacheStats", "PrefixCachedLM", "PrefixNode", "PrefixTree",
        "max_positions_of", "plan_groups",
        "require_pieces", "require_version", "shared_prefixes", "version_supported",
    ],
    "genlm_core.testing": ["AsyncLMConformance", "ByteTokenizer", "LoraConformance", "MockAsyncLM"],
}  # fmt: skip


@pytest.mark.parametrize("package", sorted(PACKAGE_SURFACES))
def test_each_package_surface_is_pinned_and_resolves(package):
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(PACKAGE_SURFACES[package])
    for name in module.__all__:
        assert getattr(module, name) is not None


def test_concept_packages_keep_their_modules_internal():
    """lm/, runtime/, loading/ and genlm_backend_kit: every module but __init__ is underscored."""
    from pathlib import Path

    import genlm_backend_kit

    root = Path(genlm_core.__file__).parent
    folders = [root / p for p in ("lm", "runtime", "loading")]
    for folder in [*folders, Path(genlm_backend_kit.__file__).parent]:
        modules = [p.name for p in folder.glob("*.py")]
        assert "__init__.py" in modules, folder
        public = [name for name in modules if not name.startswith("_")]
        assert public == [], f"{folder} has public modules {public}"


def test_the_backend_kits_old_import_path_is_the_kit_itself():
    import genlm_backend_kit
    import genlm_core.backend_kit
    from genlm_core.backend_kit import PrefixCachedLM

    assert genlm_core.backend_kit is genlm_backend_kit
    assert PrefixCachedLM is genlm_backend_kit.PrefixCachedLM


def test_without_the_backend_kit_its_old_path_says_what_to_install():
    code = (
        "import sys; sys.modules['genlm_backend_kit'] = None\n"
        "try:\n    import genlm_core.backend_kit\n"
        "except ModuleNotFoundError as e:\n    print(e)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "pip install genlm-backend-kit" in done.stdout, done.stdout


def test_genlm_backend_import_paths_keep_working():
    from genlm_core.cache import OutputCache
    from genlm_core.llm import AsyncLM, MockAsyncLM, load_model_by_name
    from genlm_core.tokenization import Token, decode_vocab
    from genlm_core.trie import AsyncTokenCharacterTrie, TokenCharacterTrie

    assert OutputCache is genlm_core.OutputCache and AsyncLM is genlm_core.AsyncLM
    assert MockAsyncLM and load_model_by_name and Token and decode_vocab
    assert AsyncTokenCharacterTrie and TokenCharacterTrie


def test_star_import_with_only_the_core_installed():
    code = "from genlm_core import *; import genlm_core; print(len(dir(genlm_core)))"
    hidden = ("genlm_hf", "genlm_trie_numba", "genlm_trie_torch")
    env_code = f"import sys; sys.modules.update(dict.fromkeys({hidden!r})); {code}"  # not installed
    out = subprocess.run([sys.executable, "-c", env_code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr

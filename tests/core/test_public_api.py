import importlib
import subprocess
import sys

import pytest

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
    "TokenCharacterTrie",
    "AsyncTokenCharacterTrie",
    "TokenByteTrie",
    "ParallelTokenCharacterTrie",
]
#: Model classes that live in backend plugins, importable from the top but not in
#: ``__all__``: the class, or a placeholder that raises the install command when used.
PLUGIN_CLASSES = {"AsyncTransformer": "genlm-hf", "AsyncVirtualLM": "genlm-vllm"}


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

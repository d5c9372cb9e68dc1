"""The tries are plugins: registered, ranked, probed, replaceable.

The core registers the ``reference`` trie; genlm-trie-numba and genlm-trie-torch
register the others through ``genlm.tries``. The isolated ``trie_registry`` loads no
entry points, so the plugins' modules are registered on it by ``trie_plugins``.
"""

from __future__ import annotations

import numpy as np
import pytest
from session_requires import require

from genlm_core.plugins import TrieRegistry, TrieSpec, get_plugin_manager, hookimpl
from genlm_core.tokenization import Token
from genlm_core.trie import AsyncTokenCharacterTrie, ReferenceTokenCharacterTrie

VOCAB = [Token(0, b"a"), Token(1, b"ab")]
#: Each trie plugin's distribution and the names it registers.
PLUGINS = {
    "genlm_trie_numba": ("genlm-trie-numba", {"numba", "numba-byte", "sequential", "parallel"}),
    "genlm_trie_torch": ("genlm-trie-torch", {"torch-cuda"}),
}


@pytest.fixture
def trie_plugins(trie_registry, register_plugin):
    """The isolated registry with the two trie plugins' entry-point modules registered."""
    for package in PLUGINS:
        register_plugin(require(f"{package}._plugin"), name=package)
    return trie_registry


def test_the_core_alone_registers_the_reference_trie(trie_registry):
    assert [r.name for r in trie_registry.all()] == ["reference"]
    assert trie_registry.pick("character").name == "reference"
    assert trie_registry.get("reference").distribution == "genlm-core"


def test_the_core_alone_has_no_byte_trie_and_says_what_to_install(trie_registry):
    from genlm_core.errors import BackendUnavailableError

    with pytest.raises(BackendUnavailableError, match="no available byte trie") as info:
        trie_registry.pick("byte")
    assert "genlm-trie-numba" in str(info.value)


@pytest.mark.parametrize("package", sorted(PLUGINS))
def test_each_trie_plugin_registers_through_its_entry_point(package):
    require(package)
    distribution, names = PLUGINS[package]
    registry = TrieRegistry(get_plugin_manager())
    assert {r.name for r in registry.all() if r.distribution == distribution} == names


def test_byte_trie_is_registered(trie_plugins):
    from genlm_core.trie import TokenByteTrie

    reg = trie_plugins.pick("byte")
    assert reg.name == "numba-byte" and reg.spec.load() is TokenByteTrie


def test_tries_are_registered_best_first(trie_plugins):
    names = [r.name for r in trie_plugins.for_kind("character")]
    assert names[:3] == ["numba", "torch-cuda", "reference"]
    assert {"sequential", "parallel"} <= set(names)
    for reg in trie_plugins.for_kind("character"):
        assert reg.spec.description


def test_numba_is_the_automatic_choice_here(trie_plugins):
    from genlm_core.trie import TokenCharacterTrie

    reg = trie_plugins.pick("character")
    assert reg.name == "numba"
    assert reg.spec.load() is TokenCharacterTrie


def test_compatibility_names_are_never_automatic(trie_plugins):
    for name in ("sequential", "parallel"):
        assert trie_plugins.get(name).spec.auto is False


def test_torch_cuda_probe_names_the_missing_gpu(trie_plugins):
    from genlm_core.plugins import has_nvidia_gpu

    avail = trie_plugins.get("torch-cuda").availability()
    assert avail.ok == has_nvidia_gpu()
    if not avail.ok:
        assert "requires an NVIDIA GPU" in avail.reason


def test_every_loader_resolves(trie_plugins):
    for reg in trie_plugins.all():
        assert callable(reg.spec.load())


class _PreferReference:
    @hookimpl
    def genlm_register_tries(self, register):
        register(
            TrieSpec(
                name="my-trie",
                loader="genlm_core.trie.reference:ReferenceTokenCharacterTrie",
                priority=1000,
                kind="character",
                description="a third-party trie",
            )
        )


def test_a_plugin_trie_outranks_the_others(
    plugin_manager, trie_plugins, register_plugin, monkeypatch
):
    from genlm_core.trie import TokenCharacterTrie

    register_plugin(_PreferReference(), name="prefer-reference")
    assert trie_plugins.pick("character").name == "my-trie"
    monkeypatch.setattr("genlm_core.plugins.get_plugin_manager", lambda: plugin_manager)
    async_trie = AsyncTokenCharacterTrie.from_vocab(VOCAB)
    assert type(async_trie.trie) is ReferenceTokenCharacterTrie
    np.testing.assert_array_equal(
        async_trie.trie.weight_sum([0.25, 0.75]), TokenCharacterTrie(VOCAB).weight_sum([0.25, 0.75])
    )


def test_cli_lists_the_tries(plugin_manager, trie_plugins):
    described = {r.name: r.describe() for r in trie_plugins.all()}
    assert described["numba"]["available"] is True
    assert described["reference"]["priority"] < described["numba"]["priority"]


@pytest.mark.parametrize("name", ["numba", "reference"])
def test_named_pick_of_an_available_trie(trie_plugins, name):
    assert trie_plugins.pick("character", name).name == name


def test_trie_package_exports_are_pinned_and_resolve():
    import genlm_core.trie as trie_pkg

    assert trie_pkg.__all__ == [
        "AsyncCharacterTrie",
        "AsyncTokenByteTrie",
        "AsyncTokenCharacterTrie",
        "CharacterTrie",
        "CharacterTrieBase",
        "InvalidVocabularyError",
        "InvalidWeightsError",
        "ParallelTokenCharacterTrie",
        "ReferenceTokenCharacterTrie",
        "TokenByteTrie",
        "TokenCharacterTrie",
        "TorchTokenCharacterTrie",
        "TrieMode",
        "VocabularyTypeError",
    ]
    for name in trie_pkg.__all__:
        assert getattr(trie_pkg, name).__name__ == name

"""The built-in tries are plugins: registered, ranked, probed, replaceable."""

from __future__ import annotations

import numpy as np
import pytest

from genlm_core.plugins import TrieSpec, hookimpl
from genlm_core.tokenization import Token
from genlm_core.trie import AsyncTokenCharacterTrie, ReferenceTokenCharacterTrie, TokenCharacterTrie

VOCAB = [Token(0, b"a"), Token(1, b"ab")]


def test_byte_trie_is_registered(trie_registry):
    from genlm_core.trie import TokenByteTrie

    reg = trie_registry.pick("byte")
    assert reg.name == "numba-byte" and reg.spec.load() is TokenByteTrie


def test_builtin_tries_are_registered_best_first(trie_registry):
    names = [r.name for r in trie_registry.for_kind("character")]
    assert names[:3] == ["numba", "torch-cuda", "reference"]
    assert {"sequential", "parallel"} <= set(names)
    for reg in trie_registry.for_kind("character"):
        assert reg.distribution == "genlm-core"
        assert reg.spec.description


def test_numba_is_the_automatic_choice_here(trie_registry):
    reg = trie_registry.pick("character")
    assert reg.name == "numba"
    assert reg.spec.load() is TokenCharacterTrie


def test_compatibility_names_are_never_automatic(trie_registry):
    for name in ("sequential", "parallel"):
        assert trie_registry.get(name).spec.auto is False


def test_torch_cuda_probe_names_the_missing_gpu(trie_registry):
    from genlm_core.plugins import has_nvidia_gpu

    avail = trie_registry.get("torch-cuda").availability()
    assert avail.ok == has_nvidia_gpu()
    if not avail.ok:
        assert "requires an NVIDIA GPU" in avail.reason


def test_every_loader_resolves(trie_registry):
    for reg in trie_registry.for_kind("character"):
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


def test_a_plugin_trie_outranks_the_builtins(
    plugin_manager, trie_registry, register_plugin, monkeypatch
):
    register_plugin(_PreferReference(), name="prefer-reference")
    assert trie_registry.pick("character").name == "my-trie"
    monkeypatch.setattr("genlm_core.plugins.get_plugin_manager", lambda: plugin_manager)
    async_trie = AsyncTokenCharacterTrie.from_vocab(VOCAB)
    assert type(async_trie.trie) is ReferenceTokenCharacterTrie
    np.testing.assert_array_equal(
        async_trie.trie.weight_sum([0.25, 0.75]), TokenCharacterTrie(VOCAB).weight_sum([0.25, 0.75])
    )


def test_cli_lists_the_tries(plugin_manager, trie_registry):
    described = {r.name: r.describe() for r in trie_registry.all()}
    assert described["numba"]["available"] is True
    assert described["reference"]["priority"] < described["numba"]["priority"]


@pytest.mark.parametrize("name", ["numba", "reference"])
def test_named_pick_of_an_available_trie(trie_registry, name):
    assert trie_registry.pick("character", name).name == name


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

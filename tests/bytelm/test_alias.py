"""``genlm_core.bytes`` (genlm-bytes' path after the rename) is ``genlm_bytelm`` itself.

Not a copy: the same module objects, so a class has one identity under both names and
patching a module attribute under one name is seen under the other.
"""

from __future__ import annotations

import importlib

import pytest

import genlm_bytelm

SUBMODULES = [
    "exact.state",
    "exact.prefill",
    "exact.canonical.added",
    "byte_lm.beam",
    "byte_lm.trie_state",
    "byte_lm.lm_state",
    "byte_lm.heal",
    "util",
    "trie",
]


def test_the_package_is_the_same_module() -> None:
    import genlm_core.bytes

    assert genlm_core.bytes is genlm_bytelm
    assert genlm_core.bytes.ExactByteState is genlm_bytelm.ExactByteState


@pytest.mark.parametrize("name", SUBMODULES)
def test_each_submodule_is_the_same_module_object(name: str) -> None:
    alias = importlib.import_module(f"genlm_core.bytes.{name}")
    real = importlib.import_module(f"genlm_bytelm.{name}")
    assert alias is real
    assert real.__spec__.name == f"genlm_bytelm.{name}"  # the alias did not rename it


def test_from_import_of_a_submodule_name() -> None:
    from genlm_bytelm.exact import state as real
    from genlm_core.bytes.exact import state

    assert state is real


def test_a_missing_submodule_is_a_plain_import_error() -> None:
    with pytest.raises(ModuleNotFoundError, match="genlm_core.bytes.no_such_module"):
        importlib.import_module("genlm_core.bytes.no_such_module")

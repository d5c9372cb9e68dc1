"""Every public name of genlm-backend 0.3.1's packages is under ``genlm_core`` too.

Migrating is an import rename: ``genlm.backend.X`` -> ``genlm_core.X``, for the
packages (``genlm.backend``, ``.llm``, ``.tokenization``, ``.trie``, ``.cache``). Model
classes of backends that are not installed are placeholder classes, as in genlm-backend
(``tests/core/test_llm_names.py``). genlm-backend's module layout inside those packages
(``trie.base``, ``trie.parallel``, ``tokenization.bytes``, ...) is not kept:
docs/migrating.md.
"""

import importlib

import pytest

PACKAGES = [
    "genlm.backend",
    "genlm.backend.llm",
    "genlm.backend.tokenization",
    "genlm.backend.trie",
    "genlm.backend.cache",
]
#: Names genlm-backend defines in genlm.backend.cache but exports nowhere: the prefix
#: tree of its own hf backend (genlm-hf has its own, genlm_backend_kit).
NOT_PORTED = {("genlm.backend.cache", "TokenTrie")}


def _public_names(module):
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return [
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and getattr(value, "__module__", "").startswith(module.__name__)
    ]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_is_there_after_the_rename(package):
    theirs = importlib.import_module(package)
    ours = importlib.import_module(package.replace("genlm.backend", "genlm_core"))
    names = [n for n in _public_names(theirs) if (package, n) not in NOT_PORTED]
    assert names
    for name in names:
        value = getattr(ours, name)
        assert value is not None, name
        if isinstance(getattr(theirs, name), type):
            assert isinstance(value, type) and value.__name__ == name

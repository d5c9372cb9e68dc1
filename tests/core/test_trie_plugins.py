"""The core without its trie plugins: the reference trie is picked, moved names say what to install.

The numba and torch tries ship as genlm-trie-numba and genlm-trie-torch; the core keeps
the protocols, the async front and the pure-NumPy ``reference`` trie, and genlm-backend's
import path ``genlm_core.trie`` for the moved names. Run in a subprocess whose import
system cannot find the plugins (and whose plugin manager loads no entry point of
theirs), so the tests hold whether or not they are installed here.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

HIDE_TRIES = """
import importlib.abc, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("genlm_trie_numba", "genlm_trie_torch"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name.split(".")[0])
sys.meta_path.insert(0, Hide())
"""


def run(code: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter without the trie plugins (their entry points disabled)."""
    env = {**os.environ, "GENLM_DISABLE_PLUGINS": "numba,torch-cuda"}
    return subprocess.run(
        [sys.executable, "-c", HIDE_TRIES + code], capture_output=True, text=True, env=env
    )


@pytest.mark.parametrize(
    ("statement", "distribution"),
    [
        ("from genlm_core.trie import TokenCharacterTrie", "genlm-trie-numba"),
        ("from genlm_core.trie import ParallelTokenCharacterTrie", "genlm-trie-numba"),
        ("from genlm_core.trie import TokenByteTrie", "genlm-trie-numba"),
        ("from genlm_core import TokenCharacterTrie", "genlm-trie-numba"),
        ("from genlm_core.trie import TorchTokenCharacterTrie", "genlm-trie-torch"),
    ],
)
def test_a_moved_name_says_what_to_install(statement: str, distribution: str) -> None:
    done = run(statement)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    name = statement.rsplit(" ", 1)[-1]
    assert last.startswith(f"ModuleNotFoundError: genlm_core.trie.{name} ships in {distribution}")
    assert f"pip install {distribution} " in last
    assert "pip install -e plugins/genlm_trie_numba" in last


def test_the_core_alone_builds_the_reference_trie() -> None:
    code = """
import asyncio, numpy as np, genlm_core
from genlm_core import *
from genlm_core.trie import AsyncTokenCharacterTrie, TrieMode, AsyncTokenByteTrie
from genlm_core.tokenization import Token
trie = AsyncTokenCharacterTrie.from_vocab([Token(0, b"a"), Token(1, b"ab")])
masses = asyncio.run(trie.weight_sum(np.array([0.25, 0.75])))
print(type(trie.trie).__name__, masses[trie.trie.root], TrieMode.WITH_EOS.value)
"""
    done = run(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ReferenceTokenCharacterTrie 1.0 with_eos\n"


def test_the_core_alone_names_the_trie_plugins_for_a_byte_trie() -> None:
    code = """
from genlm_core.trie import AsyncTokenByteTrie
from genlm_core.tokenization import Token
AsyncTokenByteTrie.from_vocab([Token(0, b"a")])
"""
    done = run(code)
    assert done.returncode == 1
    assert "BackendUnavailableError: no available byte trie implementation" in done.stderr
    assert "genlm-trie-numba" in done.stderr


def test_genlm_backends_lists_the_missing_trie_plugins() -> None:
    done = run("from genlm_core.cli import main; main(['backends'])")
    assert done.returncode == 0, done.stderr
    assert "Official trie plugins not installed or not loaded:" in done.stdout
    assert "genlm-trie-numba" in done.stdout and "genlm-trie-torch" in done.stdout

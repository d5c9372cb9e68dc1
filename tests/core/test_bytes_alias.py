"""``genlm_core.bytes`` without genlm-bytelm: the import says what to install.

The byte-level LM ships as its own distribution (plugins/genlm_bytelm); the core keeps
genlm-bytes' import path as an alias of it. Run in a subprocess whose import system
cannot find ``genlm_bytelm``, so the test holds whether or not it is installed here.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

HIDE_BYTELM = """
import importlib.abc, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "genlm_bytelm" or name.startswith("genlm_bytelm."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Hide())
"""


@pytest.mark.parametrize(
    "statement",
    [
        "import genlm_core.bytes",
        "from genlm_core.bytes import ExactByteState",
        "from genlm_core.bytes.exact.state import ExactByteState",
    ],
)
def test_without_genlm_bytelm_the_alias_names_what_to_install(statement: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", HIDE_BYTELM + statement], capture_output=True, text=True
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: genlm_core.bytes is the byte-level LM"), last
    assert "pip install genlm-bytelm" in last and "plugins/genlm_bytelm" in last


def test_the_core_imports_without_the_byte_level_lm() -> None:
    code = HIDE_BYTELM + "import genlm_core, genlm_core.trie, genlm_core.testing; print('ok')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr

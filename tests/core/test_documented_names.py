"""Every ``package.Name`` the README and docs/ mention imports, where its package is here.

tests/docs/test_site.py resolves them all in the sources (the docs session installs
no package); this imports them, as a reader would. A name whose plugin or engine is
not installed in this session is left to the sessions that install it, and counted.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

from documented_names import ROOT, documented_names

#: The example plugin of docs/plugin-quickstart.md, installed by the plugin-author session.
ELSEWHERE = ("genlm_dummy",)


def _mentioned() -> dict[str, Path]:
    return {n: p for n, p in documented_names().items() if not n.startswith(ELSEWHERE)}


def _resolve(name: str) -> object:
    """``name`` imported: its longest module prefix, then attributes.

    Raises:
        ModuleNotFoundError: A module it needs is not installed here (a plugin, an engine).
        AttributeError: The name does not exist: the docs are wrong.
    """
    parts = name.split(".")
    cut = len(parts)
    while cut > 1 and not _is_module(".".join(parts[:cut])):
        cut -= 1
    obj = importlib.import_module(".".join(parts[:cut]))
    for attr in parts[cut:]:
        obj = getattr(obj, attr)
    return obj


def _is_module(dotted: str) -> bool:
    try:
        return importlib.util.find_spec(dotted) is not None
    except ModuleNotFoundError:  # a parent package is not installed
        return False


def test_every_documented_name_imports():
    missing, elsewhere = [], []
    for name, page in sorted(_mentioned().items()):
        try:
            _resolve(name)
        except ModuleNotFoundError as error:
            # the plugin, or its engine, is not installed in this session
            elsewhere.append(f"{name} ({error.name})")
        except AttributeError as error:
            missing.append(f"{page.relative_to(ROOT)}: {name}: {error}")
    assert not missing, missing
    assert len(elsewhere) < len(_mentioned()) // 2, f"most names were not importable: {elsewhere}"

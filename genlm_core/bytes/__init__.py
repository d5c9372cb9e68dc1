"""``genlm_core.bytes``: an alias of [`genlm_bytelm`][], the byte-level LM's own distribution.

genlm-bytes' code migrates by an import rename (``genlm.bytes`` -> ``genlm_core.bytes``);
the byte-level LM itself ships apart from the core (``pip install genlm-bytelm``). Every
``genlm_core.bytes[.sub.module]`` is the very module object of ``genlm_bytelm[.sub.module]``
(one class per name, so ``isinstance`` and monkeypatching agree under either name).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

_ALIAS, _REAL = __name__, "genlm_bytelm"

try:
    _real = importlib.import_module(_REAL)
except ModuleNotFoundError as error:
    if error.name != _REAL:
        raise
    raise ModuleNotFoundError(
        f"{_ALIAS} is the byte-level LM, which ships as its own distribution: "
        f"pip install genlm-bytelm (from a checkout: pip install -e plugins/genlm_bytelm)",
        name=_ALIAS,
    ) from None


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves ``genlm_core.bytes.X`` to the module ``genlm_bytelm.X`` (importing it)."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(_ALIAS + "."):
            return None
        real = _REAL + fullname[len(_ALIAS) :]
        if importlib.util.find_spec(real) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        module = importlib.import_module(_REAL + spec.name[len(_ALIAS) :])
        spec.loader_state = module.__spec__  # the import system sets the alias's on it
        return module

    def exec_module(self, module):  # the real module ran when it was imported
        module.__spec__ = module.__spec__.loader_state


if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _AliasFinder())
sys.modules[_ALIAS] = _real

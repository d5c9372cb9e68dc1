"""Import-time stand-ins for CUDA-only modules SGLang imports but never runs on a CPU.

Test environment only (``nox -s sgl`` puts this folder on ``PYTHONPATH``); never part
of a shipped package. A stand-in module lets ``import X`` and ``from X.y import Z``
succeed, so that SGLang's module-level imports resolve, but calling, indexing or
iterating anything taken from it raises :class:`StandInCalledError`: no test can pass
through a fake kernel.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types


class StandInCalledError(RuntimeError):
    """Something used a stand-in for a module that cannot run here."""


class Absent:
    """A name taken from a stand-in module: attribute access is allowed, use is not."""

    def __init__(self, path: str, reason: str) -> None:
        self._path = path
        self._reason = reason

    def _fail(self, *args: object, **kwargs: object):
        raise StandInCalledError(
            f"{self._path} was used, but it comes from a test stand-in: {self._reason}"
        )

    def __getattr__(self, name: str) -> Absent:
        if name.startswith("__"):
            raise AttributeError(name)
        return Absent(f"{self._path}.{name}", self._reason)

    __call__ = __getitem__ = __iter__ = __len__ = __bool__ = _fail

    def __mro_entries__(self, bases: tuple) -> tuple:
        """Subclassing a stand-in class gives a class whose instances cannot be made."""
        return (_unusable_base(self),)

    def __repr__(self) -> str:
        return f"<stand-in {self._path}>"


def _unusable_base(absent: Absent) -> type:
    def __init__(self, *args: object, **kwargs: object) -> None:
        absent._fail()

    return type(absent._path.rsplit(".", 1)[-1], (), {"__init__": __init__})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes ``<package>.<anything>`` a stand-in module too."""

    def __init__(self, package: str, reason: str) -> None:
        self.package = package
        self.reason = reason

    def find_spec(self, fullname, path, target=None):
        if fullname.startswith(self.package + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return _module(spec.name, self.reason)

    def exec_module(self, module):
        pass


def _module(name: str, reason: str) -> types.ModuleType:
    module = types.ModuleType(name, f"Test stand-in: {reason}")
    module.__path__ = []  # a package, so submodules resolve through the finder
    module.__getattr__ = lambda attr: _attr(name, attr, reason)
    return module


def _attr(module: str, attr: str, reason: str) -> Absent:
    if attr.startswith("__"):
        raise AttributeError(attr)
    return Absent(f"{module}.{attr}", reason)


def install(package: types.ModuleType, reason: str) -> None:
    """Turn ``package`` (a stand-in's ``__init__``) and its submodules into stand-ins."""
    package.__doc__ = f"Test stand-in: {reason}"
    # find_spec() sees the stand-in, so libraries that probe for the package (e.g.
    # transformers) take it as installed; a version no real release has keeps them
    # on their fallback paths.
    package.__version__ = "0+standin"
    package.__getattr__ = lambda attr: _attr(package.__name__, attr, reason)
    sys.meta_path.insert(0, _Finder(package.__name__, reason))

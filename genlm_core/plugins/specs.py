"""What a plugin registers: [`BackendSpec`][], [`TrieSpec`][], [`Availability`][].

Import-light data classes: the engine is named by a ``"module:attr"`` string, imported
only when a user loads that backend.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from genlm_core.errors import BackendContractError, PluginLoadError

__all__ = ["Availability", "BackendSpec", "TrieSpec", "resolve_loader"]

_NAME = re.compile(r"^[a-z][a-z0-9_.-]*$")
_LOADER = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


@dataclass(frozen=True)
class Availability:
    """Whether a backend can run on this machine, and if not, why.

    Attributes:
        ok: True when the backend can be loaded here.
        reason: A human sentence saying why not (or a note when ``ok``).
    """

    ok: bool
    reason: str = ""

    @classmethod
    def yes(cls, note: str = "") -> Availability:
        """The backend can run here; ``note`` may say on what (e.g. "CUDA, 1 GPU")."""
        return cls(True, note)

    @classmethod
    def no(cls, reason: str) -> Availability:
        """The backend cannot run here; ``reason`` says why and, ideally, the fix."""
        if not reason:
            raise BackendContractError("Availability.no() needs a reason a user can act on")
        return cls(False, reason)

    def __bool__(self) -> bool:
        return self.ok


def resolve_loader(loader: str | Callable[..., Any], *, what: str) -> Callable[..., Any]:
    """Import a ``"module:attr.path"`` loader string, or return a callable unchanged.

    ``what`` names the owner in error messages (e.g. ``"backend 'hf'"``).

    Raises:
        PluginLoadError: The module cannot be imported or has no such attribute.
    """
    if callable(loader):
        return loader
    module_name, _, attr_path = loader.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, but also errors raised while importing
        raise PluginLoadError(
            f"{what}: cannot import {module_name!r} (loader {loader!r}): "
            f"{type(exc).__name__}: {exc}. Is the plugin's engine installed?"
        ) from exc
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise PluginLoadError(
                f"{what}: module {module_name!r} has no attribute {attr_path!r} "
                f"(loader {loader!r}); fix the loader string in the plugin's spec"
            ) from exc
    if not callable(obj):
        raise BackendContractError(
            f"{what}: loader {loader!r} names {obj!r}, which is not callable"
        )
    return obj


@dataclass(frozen=True)
class _Spec:
    """The fields, checks and methods [`BackendSpec`][] and [`TrieSpec`][] share."""

    _what: ClassVar[str]
    name: str
    loader: str | Callable[..., Any]
    priority: int = 0
    check: Callable[[], Availability] = Availability.yes
    auto: bool = True

    def __post_init__(self) -> None:
        what, name, loader = self._what, self.name, self.loader
        if not isinstance(name, str) or not _NAME.match(name):
            raise BackendContractError(
                f"{what} name must be a lowercase identifier like 'hf' or 'my-backend', "
                f"got {name!r}"
            )
        if isinstance(loader, str):
            if not _LOADER.match(loader):
                raise BackendContractError(
                    f"{what} {name!r}: loader must look like 'package.module:attr', got {loader!r}"
                )
        elif not callable(loader):
            raise BackendContractError(
                f"{what} {name!r}: loader must be a 'module:attr' string or a callable, "
                f"got {loader!r}"
            )
        if not isinstance(self.priority, int) or isinstance(self.priority, bool):
            raise BackendContractError(
                f"{what} {name!r}: priority must be an int, got {self.priority!r}"
            )
        if not callable(self.check):
            raise BackendContractError(f"{what} {name!r}: check must be callable")

    def availability(self) -> Availability:
        """Run the probe, turning a crashing probe into an explained ``Availability.no``."""
        where = f"{self._what} {self.name!r}"
        try:
            result = self.check()
        except Exception as exc:
            return Availability.no(
                f"{where}: availability probe crashed: {type(exc).__name__}: {exc}"
            )
        if not isinstance(result, Availability):
            return Availability.no(
                f"{where}: availability probe returned {result!r}, not Availability"
            )
        return result

    def load(self) -> Callable[..., Any]:
        """Import and return the loader callable (for a trie: its class or factory)."""
        return resolve_loader(self.loader, what=f"{self._what} {self.name!r}")


@dataclass(frozen=True)
class BackendSpec(_Spec):
    """A language-model backend offered by a plugin.

    Attributes:
        name: What users pass as ``backend=`` (lowercase, e.g. ``"vllm"``).
        loader: ``"module:attr"`` of a callable ``(model_name, **llm_opts) -> AsyncLM``,
            imported only when the backend is loaded (so discovery stays cheap).
        priority: Higher wins among available automatic backends
            (built-ins: vllm 100, sgl 90, mlx on Apple silicon 80, hf 50).
        check: Cheap probe returning [`Availability`][]. It must not import the
            engine or initialise CUDA.
        auto: If False the backend is used only when named explicitly.
        description: One line shown by ``genlm backends``.
        install_hint: What to ``pip install`` to get it (shown in errors).
    """

    _what: ClassVar[str] = "backend"
    description: str = ""
    install_hint: str = ""


@dataclass(frozen=True)
class TrieSpec(_Spec):
    """A token-trie implementation offered by a plugin.

    Attributes:
        name: What users pass as ``backend=`` to ``AsyncTokenCharacterTrie.from_vocab``.
        loader: ``"module:attr"`` of the trie class (or a factory ``(vocab, **kw) -> trie``).
        priority: Higher wins among available automatic implementations.
        check: Cheap probe returning [`Availability`][].
        auto: If False the implementation is used only when named.
        kind: ``"character"`` (genlm-backend's TokenCharacterTrie family) or
            ``"byte"`` (genlm-bytes' TokenByteTrie family).
        description: One line shown by ``genlm backends``.
    """

    _what: ClassVar[str] = "trie"
    kind: str = "character"
    description: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.kind not in ("character", "byte"):
            raise BackendContractError(
                f"trie {self.name!r}: kind must be 'character' or 'byte', got {self.kind!r}"
            )

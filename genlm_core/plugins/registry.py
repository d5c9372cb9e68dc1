"""Registries: what the plugins registered, with origin, availability and conflicts.

Every query calls the register hooks afresh (cheap), so plugins registered later are
seen at once; each hook runs on its own, so one that raises is recorded broken and the
others still count.
"""

from __future__ import annotations

import difflib
import logging
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import pluggy

from genlm_core.errors import (
    BackendContractError,
    BackendUnavailableError,
    DuplicateBackendError,
    UnknownBackendError,
)
from genlm_core.plugins import official, official_tries
from genlm_core.plugins.manager import BrokenPlugin, GenlmPluginManager
from genlm_core.plugins.specs import Availability, BackendSpec, TrieSpec

__all__ = ["BackendRegistry", "Registered", "TrieRegistry", "call_hookimpl"]

S = TypeVar("S", BackendSpec, TrieSpec)
log = logging.getLogger(__name__)


def call_hookimpl(impl: pluggy.HookImpl, hook_name: str, **kwargs: Any) -> Any:
    """Call one hook implementation as pluggy does: with the arguments it declares.

    ``kwargs`` holds every argument of the hookspec; a hookimpl may declare fewer.

    Raises:
        BackendContractError: ``impl`` is a hook wrapper, which would register or
            select nothing, silently.
    """
    if impl.hookwrapper or impl.wrapper:
        raise BackendContractError(
            f"{hook_name} of plugin {impl.plugin_name!r} is a hook wrapper; genlm calls "
            f"each implementation of {hook_name} on its own, so declare it without "
            f"wrapper=True / hookwrapper=True"
        )
    return impl.function(*(kwargs[name] for name in impl.argnames))


@dataclass(frozen=True)
class Registered(Generic[S]):
    """A spec together with the plugin and distribution that registered it."""

    spec: S
    plugin: str
    distribution: str
    version: str

    @property
    def name(self) -> str:
        """The spec's name."""
        return self.spec.name

    def availability(self) -> Availability:
        """Run the spec's probe."""
        return self.spec.availability()

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description (used by ``genlm backends --json``)."""
        avail = self.availability()
        return {
            "name": self.name,
            "plugin": self.plugin,
            "distribution": self.distribution,
            "version": self.version,
            "priority": self.spec.priority,
            "auto": self.spec.auto,
            "available": avail.ok,
            "reason": avail.reason,
            "description": self.spec.description,
            **(
                {"install_hint": self.spec.install_hint}
                if isinstance(self.spec, BackendSpec)
                else {}
            ),
        }


class _Registry(Generic[S]):
    kind: str = ""
    hook_name: str = ""
    spec_type: type

    def __init__(self, plugin_manager: GenlmPluginManager) -> None:
        self.plugin_manager = plugin_manager

    def _collect(
        self,
    ) -> tuple[dict[str, Registered[S]], dict[str, list[Registered[S]]], list[BrokenPlugin]]:
        pm = self.plugin_manager
        by_name: dict[str, list[Registered[S]]] = {}
        broken: list[BrokenPlugin] = []
        hook = getattr(pm.hook, self.hook_name)
        for impl in hook.get_hookimpls():
            origin = pm.origin(impl.plugin_name)
            specs: list[object] = []
            try:
                call_hookimpl(impl, self.hook_name, register=specs.append)
                for spec in specs:
                    if not isinstance(spec, self.spec_type):
                        raise BackendContractError(
                            f"{self.hook_name} of plugin {impl.plugin_name!r} registered "
                            f"{spec!r}; expected a {self.spec_type.__name__}"
                        )
            except Exception as exc:
                broken.append(BrokenPlugin.of(impl.plugin_name, self.hook_name, origin, exc))
                continue
            for spec in specs:
                entry = Registered(spec, impl.plugin_name, origin.distribution, origin.version)
                by_name.setdefault(spec.name, []).append(entry)  # type: ignore[attr-defined]
        unique = {n: regs[0] for n, regs in by_name.items() if len(regs) == 1}
        conflicts = {n: regs for n, regs in by_name.items() if len(regs) > 1}
        return unique, conflicts, broken

    def all(self) -> list[Registered[S]]:
        """Every uniquely named registration, highest priority first."""
        return _best_first(self._collect()[0])

    def conflicts(self) -> dict[str, list[Registered[S]]]:
        """Names registered by more than one plugin (unusable until resolved)."""
        return self._collect()[1]

    def broken(self) -> list[BrokenPlugin]:
        """Plugins that failed to import, validate or register."""
        return [*self.plugin_manager.broken, *self._collect()[2]]

    def names(self) -> list[str]:
        """Names of every usable registration."""
        return [r.name for r in self.all()]

    def get(self, name: str) -> Registered[S]:
        """Look up a registration by name.

        Raises:
            UnknownBackendError: Nobody registered ``name``; the message lists what is
                installed, what is broken, and what to install.
            DuplicateBackendError: Several plugins registered ``name``.
        """
        unique, conflicts, broken = self._collect()
        if name in unique:
            return unique[name]
        if name in conflicts:
            who = ", ".join(f"{r.plugin} ({r.distribution} {r.version})" for r in conflicts[name])
            raise DuplicateBackendError(
                f"{self.kind} name {name!r} is registered by several plugins: {who}. "
                f"Uninstall one, or block it with GENLM_DISABLE_PLUGINS=<plugin>."
            )
        raise UnknownBackendError(self._unknown_message(name, unique, broken))

    def _unknown_message(
        self, name: str, unique: dict[str, Registered[S]], broken: list[BrokenPlugin]
    ) -> str:
        lines = [
            f"unknown {self.kind} {name!r}{_did_you_mean(name, self._known(unique))}",
            f"Installed: {', '.join(sorted(unique)) or 'none'}.",
        ]
        if all_broken := [*self.plugin_manager.broken, *broken]:
            errors = "; ".join(f"{b.plugin} ({b.distribution}): {b.error}" for b in all_broken)
            lines.append(f"Broken plugins: {errors}.")
        if skipped := self.plugin_manager.skipped:
            lines.append(f"Disabled plugins: {', '.join(f'{n} ({why})' for n, why in skipped)}.")
        if name.casefold() not in unique and (hint := self._install_hint(name)):
            lines.append(hint)
        return " ".join(lines)

    def _install_hint(self, name: str) -> str:
        return ""

    def _known(self, unique: dict[str, Registered[S]]) -> list[str]:
        return list(unique)  # names a misspelling may have meant

    def require_available(self, name: str) -> Registered[S]:
        """Like [`get`][], but also require the probe to pass.

        Raises:
            BackendUnavailableError: Installed but cannot run here; says why.
        """
        reg = self.get(name)
        avail = reg.availability()
        if not avail.ok:
            raise BackendUnavailableError(
                f"{self.kind} {name!r} ({reg.distribution} {reg.version}) is installed but "
                f"unavailable here: {avail.reason}"
            )
        return reg

    def available_auto(self) -> list[Registered[S]]:
        """Automatic registrations whose probe passes, best first."""
        return [r for r in self.all() if r.spec.auto and r.availability().ok]

    def diagnosis(self) -> str:
        """A multi-line account of every registration and why each is or is not usable."""
        unique, conflicts, broken = self._collect()
        lines = []
        for reg in _best_first(unique):
            avail = reg.availability()
            state = "available" if avail.ok else f"unavailable: {avail.reason}"
            auto = "" if reg.spec.auto else ", only when named"
            lines.append(f"  {reg.name} ({reg.distribution} {reg.version}{auto}): {state}")
        for name, regs in conflicts.items():
            lines.append(f"  {name}: registered by {len(regs)} plugins, unusable")
        for b in [*self.plugin_manager.broken, *broken]:
            lines.append(f"  plugin {b.plugin} ({b.distribution}) is broken: {b.error}")
        return "\n".join(lines) or "  (nothing registered)"


def _best_first(unique: dict[str, Registered[S]]) -> list[Registered[S]]:
    return sorted(unique.values(), key=lambda r: (-r.spec.priority, r.name))


def _did_you_mean(name: str, known: list[str]) -> str:
    """``"; did you mean 'hf'?"`` for a name that differs from a known one by case or a typo.

    Returns ``"."`` when nothing is close (or ``name`` itself is known).
    """
    if name in known:
        return "."
    folded = {k.casefold(): k for k in known}
    if name.casefold() in folded:
        return f"; did you mean {folded[name.casefold()]!r}? Names are lowercase."
    close = difflib.get_close_matches(name.casefold(), list(folded), n=2, cutoff=0.6)
    if close:
        return f"; did you mean {' or '.join(repr(folded[c]) for c in close)}?"
    return "."


class BackendRegistry(_Registry[BackendSpec]):
    """The language-model backends registered through ``genlm_register_backends``."""

    kind = "backend"
    hook_name = "genlm_register_backends"
    spec_type = BackendSpec

    def _install_hint(self, name: str) -> str:
        missing = official.explain(name.casefold(), self.plugin_manager)
        if missing is not None:
            return missing.sentence() + "."
        return f"If {name!r} comes from a plugin, pip install that plugin's distribution."

    def _known(self, unique: dict[str, Registered[BackendSpec]]) -> list[str]:
        return [*unique, *(b.name for b in official.OFFICIAL_BACKENDS if b.name not in unique)]

    def select(self, model_name: str, candidates: list[str]) -> str | None:
        """The first non-None answer of the ``genlm_select_backend`` hooks, in pluggy's order.

        ``candidates`` are the available automatic backends, best first. A hook that
        raises (or answers something other than a name or None) is recorded broken,
        logged and skipped, so a faulty site hook never fails every automatic load.
        """
        hook_name = "genlm_select_backend"
        pm = self.plugin_manager
        # pluggy calls the last registered (and tryfirst) implementations first.
        for impl in reversed(getattr(pm.hook, hook_name).get_hookimpls()):
            try:
                choice = call_hookimpl(
                    impl, hook_name, model_name=model_name, candidates=list(candidates)
                )
                if choice is not None and not isinstance(choice, str):
                    raise BackendContractError(
                        f"{hook_name} of plugin {impl.plugin_name!r} returned {choice!r}; "
                        f"expected a backend name (str) or None"
                    )
            except Exception as exc:
                log.warning("ignoring %s of plugin %r: %r", hook_name, impl.plugin_name, exc)
                pm.record_broken(impl.plugin_name, hook_name, exc)
                continue
            if choice is not None:
                return choice
        return None


class TrieRegistry(_Registry[TrieSpec]):
    """The trie implementations registered through ``genlm_register_tries``."""

    kind = "trie"
    hook_name = "genlm_register_tries"
    spec_type = TrieSpec

    def _install_hint(self, name: str) -> str:
        missing = official_tries.explain(name.casefold(), self.plugin_manager)
        if missing is not None:
            return missing.sentence() + "."
        return f"If {name!r} comes from a plugin, pip install that plugin's distribution."

    def _known(self, unique: dict[str, Registered[TrieSpec]]) -> list[str]:
        official = [n for t in official_tries.OFFICIAL_TRIES for n in t.names]
        return [*unique, *(n for n in official if n not in unique)]

    def for_kind(self, kind: str) -> list[Registered[TrieSpec]]:
        """Registrations of one trie family (``"character"`` or ``"byte"``), best first."""
        return [r for r in self.all() if r.spec.kind == kind]

    def pick(self, kind: str, name: str | None = None) -> Registered[TrieSpec]:
        """The named implementation, or the best available automatic one of ``kind``."""
        if name is not None:
            return self.require_available(name)
        for reg in self.for_kind(kind):
            if reg.spec.auto and reg.availability().ok:
                return reg
        missing = official_tries.not_installed({r.name for r in self.all()}, self.plugin_manager)
        hints = "".join(f"\n  {m.sentence()}" for m in missing)
        raise BackendUnavailableError(
            f"no available {kind} trie implementation:\n{self.diagnosis()}{hints}"
        )

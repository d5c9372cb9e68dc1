"""The plugin manager: hookspecs, built-ins, and failure-isolating entry-point loading.

Unlike pluggy's ``load_setuptools_entrypoints``, which stops at the first plugin that
fails to import, each entry point loads on its own; a failure is recorded in
[`GenlmPluginManager.broken`][] (``genlm backends`` shows it).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import threading
from dataclasses import dataclass

import pluggy

from genlm_core import settings
from genlm_core.plugins import hookspecs
from genlm_core.plugins.hookspecs import PROJECT_NAME

__all__ = [
    "ENTRY_POINT_GROUPS",
    "BrokenPlugin",
    "GenlmPluginManager",
    "PluginOrigin",
    "get_plugin_manager",
    "make_plugin_manager",
    "reset_plugin_manager",
]

#: Backend plugins, trie plugins, and plugins of the other hooks (model names, commands).
ENTRY_POINT_GROUPS = ("genlm.backends", "genlm.tries", "genlm.plugins")

#: Modules inside genlm-core registered as plugins on every manager.
BUILTIN_PLUGINS = ("genlm_core._builtin.mock_backend", "genlm_core._builtin.tries")


@dataclass(frozen=True)
class PluginOrigin:
    """Where a registered plugin came from (shown by ``genlm backends``)."""

    plugin: str
    distribution: str
    version: str


@dataclass(frozen=True)
class BrokenPlugin:
    """A plugin that failed to import, register, or validate."""

    plugin: str
    group: str
    distribution: str
    version: str
    error: str

    @classmethod
    def of(
        cls, plugin: str, group: str, origin: PluginOrigin, error: BaseException | str
    ) -> BrokenPlugin:
        """The record of ``plugin`` from ``origin`` failing in ``group`` with ``error``."""
        text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        return cls(plugin, group, origin.distribution, origin.version, text)


class GenlmPluginManager(pluggy.PluginManager):
    """A pluggy manager that remembers each plugin's distribution and failures."""

    def __init__(self) -> None:
        super().__init__(PROJECT_NAME)
        self.add_hookspecs(hookspecs)
        self.broken: list[BrokenPlugin] = []
        self.skipped: list[tuple[str, str]] = []  # (entry point, why) for disabled plugins
        self._origins: dict[str, PluginOrigin] = {}

    def origin(self, plugin_name: str) -> PluginOrigin:
        """Distribution and version of a registered plugin (``"?"`` if unknown)."""
        return self._origins.get(plugin_name, PluginOrigin(plugin_name, "?", "?"))

    def record_broken(
        self,
        plugin: str,
        group: str,
        error: BaseException | str,
        origin: PluginOrigin | None = None,
    ) -> None:
        """Record a plugin failure so it is reported instead of raised."""
        entry = BrokenPlugin.of(plugin, group, origin or self.origin(plugin), error)
        if entry not in self.broken:  # a hook failing on every call is reported once
            self.broken.append(entry)

    def register_checked(
        self, plugin: object, name: str, origin: PluginOrigin, group: str = "builtin"
    ) -> bool:
        """Register ``plugin`` and validate its hooks; True on success, else recorded broken.

        The origin is remembered only on success, so a second distribution reusing a
        plugin name never relabels the first one's backends.
        """
        try:
            self.register(plugin, name=name)
        except Exception as exc:
            self.record_broken(name, group, exc, origin)
            return False
        try:
            self.check_pending()  # misspelled hook names: genlm_register_backend, ...
        except pluggy.PluginValidationError as exc:
            self.unregister(plugin)
            self.record_broken(name, group, exc, origin)
            return False
        self._origins[name] = origin
        return True

    def load_entrypoints(self, groups: tuple[str, ...] = ENTRY_POINT_GROUPS) -> None:
        """Import and register every selected entry point, isolating failures."""
        for group in groups:
            for ep in importlib.metadata.entry_points(group=group):
                dist = ep.dist
                dist_name = dist.metadata["Name"] if dist is not None else "?"
                version = dist.version if dist is not None else "?"
                selected, why = settings.plugin_selected(ep.name, dist_name)
                if not selected:
                    self.skipped.append((ep.name, why))
                    continue
                origin = PluginOrigin(ep.name, dist_name, version)
                try:
                    module = ep.load()
                except Exception as exc:
                    self.record_broken(ep.name, group, exc, origin)
                    continue
                if self.is_registered(module):
                    continue  # one module may serve both entry-point groups
                self.register_checked(module, ep.name, origin, group)


def _core_version() -> str:
    try:
        return importlib.metadata.version("genlm-core")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


def make_plugin_manager(*, load_entrypoints: bool = True) -> GenlmPluginManager:
    """A fresh manager with the hookspecs, the built-ins and (optionally) entry points.

    It shares nothing with the process-wide one; tests pass ``load_entrypoints=False``
    for an isolated manager without the installed plugins.
    """
    pm = GenlmPluginManager()
    version = _core_version()
    for module_name in BUILTIN_PLUGINS:
        name = "builtin:" + module_name.rsplit(".", 1)[-1]
        module = importlib.import_module(module_name)
        pm.register_checked(module, name, PluginOrigin(name, "genlm-core", version))
    if load_entrypoints:
        pm.load_entrypoints()
    return pm


_lock = threading.Lock()
_manager: GenlmPluginManager | None = None


def get_plugin_manager() -> GenlmPluginManager:
    """The process-wide manager, built on first use (entry points loaded once)."""
    global _manager
    with _lock:
        if _manager is None:
            _manager = make_plugin_manager()
        return _manager


def reset_plugin_manager() -> None:
    """Forget the process-wide manager so the next use rediscovers plugins."""
    global _manager
    with _lock:
        _manager = None

"""Everything a plugin author imports.

A backend plugin is a module with a ``genlm_register_backends`` hook::

    from genlm_core.plugins import Availability, BackendSpec, hookimpl

    @hookimpl
    def genlm_register_backends(register):
        register(BackendSpec(name="uniform", loader="genlm_uniform:UniformLM.from_name"))

declared in the plugin's ``pyproject.toml``::

    [project.entry-points."genlm.backends"]
    uniform = "genlm_uniform"

See ``docs/plugins.md`` for the whole manual and :mod:`genlm_core.plugins.hookspecs`
for every hook.
"""

from __future__ import annotations

import pluggy

from genlm_core.plugins.hookspecs import PROJECT_NAME
from genlm_core.plugins.manager import (
    BrokenPlugin,
    GenlmPluginManager,
    get_plugin_manager,
    make_plugin_manager,
    reset_plugin_manager,
)
from genlm_core.plugins.probes import has_nvidia_gpu, is_apple_silicon, module_available
from genlm_core.plugins.registry import BackendRegistry, Registered, TrieRegistry
from genlm_core.plugins.specs import Availability, BackendSpec, TrieSpec

hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
"""Decorator marking a function as a genlm hook implementation."""

__all__ = [
    "Availability",
    "BackendRegistry",
    "BackendSpec",
    "BrokenPlugin",
    "GenlmPluginManager",
    "Registered",
    "TrieRegistry",
    "TrieSpec",
    "get_plugin_manager",
    "has_nvidia_gpu",
    "hookimpl",
    "is_apple_silicon",
    "make_plugin_manager",
    "module_available",
    "reset_plugin_manager",
]

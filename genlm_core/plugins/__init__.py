"""Everything a plugin author imports: specs, probes, registries and ``hookimpl``.

A backend plugin is a module with a ``genlm_register_backends`` hook, named by an entry
point in the ``genlm.backends`` group. ``docs/plugin-quickstart.md`` walks through one;
`genlm_core.plugins.hookspecs` lists every hook.
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

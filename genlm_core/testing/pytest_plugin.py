"""pytest plugin: hardware markers that skip with a reason, and plugin-system fixtures.

Opt in from your root ``conftest.py``::

    pytest_plugins = ["genlm_core.testing.pytest_plugin"]

It is deliberately not auto-loaded through a ``pytest11`` entry point, which would
inject fixtures into every pytest run on machines where genlm-core is installed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from genlm_core.plugins import (
    BackendRegistry,
    GenlmPluginManager,
    Registered,
    TrieRegistry,
    has_nvidia_gpu,
    is_apple_silicon,
    make_plugin_manager,
)

MARKERS = {
    "cuda": "needs an NVIDIA GPU (skipped with the reason when NVML finds none)",
    "apple": "needs macOS on Apple silicon",
    "slow": "builds or loads real model weights",
}


def pytest_configure(config: pytest.Config) -> None:
    """Declare the markers, so ``--strict-markers`` accepts them."""
    for name, doc in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip hardware-marked tests on machines without that hardware, saying why."""
    if item.get_closest_marker("cuda") and not has_nvidia_gpu():
        from genlm_core.plugins.probes import nvidia_gpu_count

        pytest.skip(f"requires an NVIDIA GPU: {nvidia_gpu_count()[1]}")
    if item.get_closest_marker("apple") and not is_apple_silicon():
        pytest.skip("requires macOS on Apple silicon")


@pytest.fixture
def plugin_manager() -> GenlmPluginManager:
    """A fresh plugin manager with the hookspecs and built-ins, and NO entry points."""
    return make_plugin_manager(load_entrypoints=False)


@pytest.fixture
def registry(plugin_manager: GenlmPluginManager) -> BackendRegistry:
    """The backend registry of the isolated [`plugin_manager`][]."""
    return BackendRegistry(plugin_manager)


@pytest.fixture
def trie_registry(plugin_manager: GenlmPluginManager) -> TrieRegistry:
    """The trie registry of the isolated [`plugin_manager`][]."""
    return TrieRegistry(plugin_manager)


@pytest.fixture
def register_plugin(plugin_manager: GenlmPluginManager) -> Iterator[Callable[..., str]]:
    """Register in-test plugin objects on [`plugin_manager`][]; unregistered afterwards."""
    names: list[str] = []

    def _register(plugin: object, name: str | None = None) -> str:
        registered = plugin_manager.register(plugin, name=name)
        if registered is None:
            raise ValueError(f"plugin {plugin!r} was blocked by the plugin manager")
        names.append(registered)
        return registered

    yield _register
    for n in names:
        if plugin_manager.has_plugin(n):
            plugin_manager.unregister(name=n)


@pytest.fixture
def installed_backends() -> dict[str, Registered]:
    """Backends found by real discovery (entry points), for integration tests."""
    from genlm_core.loading import list_backends
    from genlm_core.plugins import reset_plugin_manager

    reset_plugin_manager()
    return {b.name: b for b in list_backends()}


@pytest.fixture(scope="session")
def asset_tokenizer_dir() -> Callable[[str], Path]:
    """``asset_tokenizer_dir(name)``: a registry-sourced tokenizer dir (fetched once, cached)."""
    from genlm_assets import tokenizer_dir

    return tokenizer_dir


@pytest.fixture(scope="session")
def asset_model_dir() -> Callable[[str], Path]:
    """``asset_model_dir(name)``: a registry-sourced model dir (fetched once, cached)."""
    from genlm_assets import model_dir

    return model_dir

"""The project's own trie plugins: which are not installed, and the command to install each.

The core registers only the pure-NumPy ``reference`` trie; the fast ones ship apart
(each in its folder under ``plugins/``) and register through ``genlm.tries`` like any plugin. This
table lets ``genlm backends`` and the trie registry name the missing ones with their
install command, as [`genlm_core.plugins.official`][] does for backends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from genlm_core.plugins import official

if TYPE_CHECKING:
    from genlm_core.plugins.manager import GenlmPluginManager

__all__ = [
    "OFFICIAL_TRIES",
    "MissingTrie",
    "OfficialTrie",
    "explain",
    "install_command",
    "not_installed",
]


@dataclass(frozen=True)
class OfficialTrie:
    """One of the project's trie plugins.

    Attributes:
        distribution: Its distribution on PyPI (import package: ``-`` -> ``_``).
        plugin: Its entry point's name (what GENLM_PLUGINS and GENLM_DISABLE_PLUGINS name).
        names: The trie names it registers (``backend=`` of ``from_vocab``).
        runs_on: Where its tries run.
    """

    distribution: str
    plugin: str
    names: tuple[str, ...]
    runs_on: str

    @property
    def package(self) -> str:
        """Its import package, and its folder in a checkout, under ``plugins/``."""
        return self.distribution.replace("-", "_")


#: In the order ``genlm backends`` lists the ones not installed.
OFFICIAL_TRIES = (
    OfficialTrie(
        "genlm-trie-numba",
        "numba",
        ("numba", "numba-byte", "sequential", "parallel"),
        "any CPU (numba kernels): the fast default and the byte tries of genlm-bytelm",
    ),
    OfficialTrie("genlm-trie-torch", "torch-cuda", ("torch-cuda",), "NVIDIA GPUs (torch)"),
)
_BY_NAME = {name: t for t in OFFICIAL_TRIES for name in t.names}


def install_command(distribution: str) -> str:
    """The exact ``pip install`` command for official trie plugin ``distribution``.

    From a source checkout it is installed from its folder (editable), after
    genlm-trie-numba's when that is not installed (genlm-trie-torch depends on it,
    and it is not on the package index a checkout's pip asks).

    Raises:
        KeyError: ``distribution`` is not an official trie plugin.
    """
    trie = {t.distribution: t for t in OFFICIAL_TRIES}[distribution]
    plugins = official._checkout_plugins()
    if plugins is None or not (plugins / trie.package / "pyproject.toml").is_file():
        return f"pip install {trie.distribution}"
    return official.checkout_install(plugins, trie.package)


@dataclass(frozen=True)
class MissingTrie:
    """An official trie plugin that registered nothing here, and what to do about it.

    Attributes:
        trie: The official trie plugin.
        state: ``"not installed"``, ``"broken"`` or ``"disabled"``.
        detail: The install command, the plugin's error, or the variable that disabled it.
    """

    trie: OfficialTrie
    state: str
    detail: str

    def sentence(self) -> str:
        """One line for messages: what is wrong and the fix."""
        return official.missing_sentence(self.trie.distribution, self.state, self.detail)


def explain(name: str, plugin_manager: GenlmPluginManager) -> MissingTrie | None:
    """Why official trie ``name`` is not registered, or None if no official plugin has it."""
    trie = _BY_NAME.get(name)
    if trie is None:
        return None
    what = f"trie named {name!r}"
    found = official.diagnose(trie.distribution, trie.plugin, what, plugin_manager)
    if found is not None:
        return MissingTrie(trie, *found)
    return MissingTrie(trie, "not installed", install_command(trie.distribution))


def not_installed(registered: set[str], plugin_manager: GenlmPluginManager) -> list[MissingTrie]:
    """The official trie plugins that registered none of their names here, each explained."""
    return [
        explain(t.names[0], plugin_manager)  # type: ignore[misc]
        for t in OFFICIAL_TRIES
        if not registered & set(t.names)
    ]

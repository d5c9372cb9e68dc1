"""The project's own backends: which are not installed, and the command to install each.

What genlm-core knows of them is the table ``official.toml``; each plugin owns its
install recipe (``install.toml``, read by `genlm_core.plugins._recipe`). This
module finds the recipe and words it for this machine (docs/maintainers.md).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from genlm_core import settings
from genlm_core.plugins._recipe import FILE, Recipe, load
from genlm_core.plugins.probes import nvidia_gpu_count

if TYPE_CHECKING:
    from genlm_core.plugins.manager import GenlmPluginManager

__all__ = [
    "OFFICIAL_BACKENDS",
    "Host",
    "Missing",
    "OfficialBackend",
    "engine_extra",
    "explain",
    "install_command",
    "install_hint",
    "install_note",
    "not_installed",
    "recipe",
]


@dataclass(frozen=True)
class OfficialBackend:
    """One of the project's backends.

    Attributes:
        name: The backend name (``backend=...``).
        distribution: Its distribution on PyPI.
        model_class: genlm-backend's name for its model class, in the plugin's ``lm``.
        libraries: The distributions behind it whose versions ``genlm doctor`` reports.
    """

    name: str
    distribution: str
    model_class: str
    libraries: tuple[str, ...]

    @property
    def package(self) -> str:
        """Its import package, and its folder in a checkout, under ``plugins/``."""
        return self.distribution.replace("-", "_")

    @property
    def runs_on(self) -> str:
        """Where it runs, in the plugin's own words (empty if its recipe is not found)."""
        found = recipe(self.name)
        return found.runs_on if found is not None else ""


def _table() -> tuple[OfficialBackend, ...]:
    text = Path(__file__).with_name("official.toml").read_text(encoding="utf-8")
    return tuple(
        OfficialBackend(name, row["distribution"], row["model_class"], tuple(row["libraries"]))
        for name, row in tomllib.loads(text).items()
    )


OFFICIAL_BACKENDS = _table()
_BY_NAME = {b.name: b for b in OFFICIAL_BACKENDS}


@dataclass(frozen=True)
class Host:
    """The facts of a machine that install recipes depend on.

    Attributes:
        gpus: NVIDIA GPUs this process can use (``CUDA_VISIBLE_DEVICES`` applied).
        system: ``platform.system()``: ``"Linux"``, ``"Darwin"``, ``"Windows"``.
        machine: ``platform.machine()``: ``"x86_64"``, ``"arm64"``, ...
    """

    gpus: int
    system: str
    machine: str

    @classmethod
    def here(cls) -> Host:
        """This machine."""
        return cls(nvidia_gpu_count()[0], platform.system(), platform.machine())


def _checkout_plugins() -> Path | None:
    """The ``plugins/`` folder when genlm-core runs from a source checkout, else None."""
    folder = Path(__file__).resolve().parents[2] / "plugins"
    found = any((folder / b.package / "pyproject.toml").is_file() for b in OFFICIAL_BACKENDS)
    return folder if found else None


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def recipe(name: str) -> Recipe | None:
    """The install recipe of official backend ``name``, or None if it is not found.

    Read from the installed plugin's package (found without importing it), else from
    the checkout's ``plugins/``.

    Raises:
        KeyError: ``name`` is not an official backend.
    """
    backend = _BY_NAME[name]
    folders: list[str | Path] = []
    if _installed(backend.distribution):
        try:
            spec = importlib.util.find_spec(backend.package)
        except (ImportError, ValueError):
            spec = None
        folders += (spec.submodule_search_locations or []) if spec is not None else []
    plugins = _checkout_plugins()
    if plugins is not None:
        folders.append(plugins / backend.package / "src" / backend.package)
    path = next((p for f in folders if (p := Path(f) / FILE).is_file()), None)
    return load(path) if path is not None else None


def engine_extra(name: str, host: Host | None = None) -> tuple[str | None, str]:
    """The extra of backend ``name`` that brings its engine on ``host``, and the plugin's note.

    ``(None, "")`` when the plugin's recipe cannot be found (neither installed nor in
    a checkout). ``host`` defaults to this machine.
    """
    found = recipe(name)
    if found is None:
        return None, ""
    host = host or Host.here()
    return found.engine_extra(gpus=host.gpus, system=host.system, machine=host.machine)


def install_command(name: str, host: Host | None = None) -> str:
    """The exact ``pip install`` command for official backend ``name`` on ``host``.

    From a source checkout the plugin is installed from its folder (editable), after
    the numba tries' folder when those are not installed: every plugin depends on
    them, and the index a checkout's pip asks does not have them.

    Raises:
        KeyError: ``name`` is not an official backend.
    """
    backend = _BY_NAME[name]
    found = recipe(name)
    extra, _ = engine_extra(name, host)
    suffix = f"[{extra}]" if extra else ""
    plugins = _checkout_plugins()
    if plugins is not None and (plugins / backend.package / "pyproject.toml").is_file():
        command = checkout_install(plugins, backend.package, suffix)
    else:
        command = f"pip install {shlex.quote(f'{backend.distribution}{suffix}')}"
    after = found.after_extra(extra) if found is not None else ()
    if after:
        command += " && pip install " + shlex.join(after)
    return command


def checkout_install(plugins: Path, package: str, suffix: str = "") -> str:
    """``pip install -e`` of ``plugins/package`` (with extras ``suffix``), from a checkout.

    The plugin's dependencies that are folders of ``plugins/`` and not installed (the
    numba tries, the backend kit) go in the same command: the index a checkout's pip
    asks does not have them.
    """
    local = _local_dependencies(plugins, package)
    folders = [str(plugins / d) for d in local if not _installed(d.replace("_", "-"))]
    folders.append(f"{plugins / package}{suffix}")
    return "pip install " + " ".join(f"-e {shlex.quote(f)}" for f in folders)


def _local_dependencies(plugins: Path, package: str) -> list[str]:
    """The folders of ``plugins/`` that ``package`` requires, directly or not."""
    found: list[str] = []
    todo = [package]
    while todo:
        project = tomllib.loads((plugins / todo.pop() / "pyproject.toml").read_text("utf-8"))
        for requirement in project["project"].get("dependencies", []):
            name = re.match(r"[A-Za-z0-9._-]+", requirement)[0].lower().replace("-", "_")
            if name not in found and (plugins / name / "pyproject.toml").is_file():
                found.append(name)
                todo.append(name)
    return found


def missing_sentence(distribution: str, state: str, detail: str, note: str = "") -> str:
    """One line for messages about a missing official plugin: what is wrong and the fix."""
    if state == "broken":
        return (
            f"{distribution} is installed but its plugin failed to load ({detail}); "
            f"reinstall it or fix the error"
        )
    if state == "disabled":
        return f"{distribution} is installed but disabled ({detail})"
    return f"{distribution} is not installed: {detail}" + (f" ({note})" if note else "")


def diagnose(dist: str, plugin: str, what: str, pm: GenlmPluginManager) -> tuple[str, str] | None:
    """``(state, detail)`` of installed ``dist`` with no ``what`` registered; else None."""
    if not _installed(dist):
        return None
    for b in pm.broken:
        if b.distribution == dist:
            return "broken", b.error
    selected, why = settings.plugin_selected(plugin, dist)
    if not selected:
        return "disabled", why
    return "broken", f"it registered no {what}"


def install_note(name: str, host: Host | None = None) -> str:
    """The plugin's note on [`install_command`][] for ``host`` (why that extra, or why not).

    Without the plugin's recipe, the note says how to get the rest.
    """
    if recipe(name) is None:
        return "then `genlm backends` gives the command for its engine on this machine"
    return engine_extra(name, host)[1]


def install_hint(name: str, host: Host | None = None) -> str:
    """[`install_command`][] followed by [`install_note`][] in parentheses, if any."""
    command, note = install_command(name, host), install_note(name, host)
    return f"{command} ({note})" if note else command


@dataclass(frozen=True)
class Missing:
    """An official backend that registered nothing here, and what to do about it.

    Attributes:
        backend: The official backend.
        state: ``"not installed"``, ``"broken"`` or ``"disabled"``.
        detail: The install command, the plugin's error, or the variable that disabled it.
        note: Why this install command (or why it cannot run here); may be empty.
    """

    backend: OfficialBackend
    state: str
    detail: str
    note: str = ""

    def sentence(self) -> str:
        """One line for messages: what is wrong and the fix."""
        return missing_sentence(self.backend.distribution, self.state, self.detail, self.note)


def explain(name: str, plugin_manager: GenlmPluginManager) -> Missing | None:
    """Why official backend ``name`` is not registered, or None if it is not official."""
    backend = _BY_NAME.get(name)
    if backend is None:
        return None
    found = diagnose(backend.distribution, backend.name, f"backend named {name!r}", plugin_manager)
    if found is not None:
        return Missing(backend, *found)
    return Missing(backend, "not installed", install_command(name), install_note(name))


def not_installed(registered: set[str], plugin_manager: GenlmPluginManager) -> list[Missing]:
    """The official backends whose name is not in ``registered``, each explained."""
    return [
        explain(b.name, plugin_manager)  # type: ignore[misc]
        for b in OFFICIAL_BACKENDS
        if b.name not in registered
    ]

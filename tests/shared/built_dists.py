"""The nine distributions here and what ``nox -s build`` made of them (tests/release).

``nox -s build`` builds each project with ``python -m build`` into ``dist/`` (or the
folder in ``GENLM_DIST``): an sdist, then a wheel built from that sdist.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from fresh_venv import ROOT

__all__ = ["BACKENDS", "DIST", "OTHER_PLUGINS", "PROJECTS", "Project", "by_name", "host", "recipe"]

DIST = Path(os.environ.get("GENLM_DIST", ROOT / "dist"))
BACKENDS = ("hf", "vllm", "mlx", "sgl")


@dataclass(frozen=True)
class Project:
    """One distribution's source: its folder, pyproject and import package."""

    folder: Path

    @property
    def pyproject(self) -> dict:
        return tomllib.loads((self.folder / "pyproject.toml").read_text())

    @property
    def name(self) -> str:
        return self.pyproject["project"]["name"]

    @property
    def package(self) -> str:
        return self.name.replace("-", "_")

    @property
    def packages(self) -> tuple[str, ...]:
        """Every import package its wheel holds: genlm-core's are genlm_core and genlm_assets."""
        wheel = self.pyproject.get("tool", {}).get("hatch", {}).get("build", {})
        listed = wheel.get("targets", {}).get("wheel", {}).get("packages", [])
        return tuple(p.rsplit("/", 1)[-1] for p in listed) or (self.package,)

    def folder_of(self, package: str) -> Path:
        """An import package's folder: ``src/<package>`` in a plugin, else ``<package>``."""
        src = self.folder / "src" / package
        return src if src.is_dir() else self.folder / package

    @property
    def source(self) -> Path:
        """The main import package's folder (the distribution's name)."""
        return self.folder_of(self.package)

    @property
    def version(self) -> str:
        """The version the sources declare (the pyproject's, or ``__version__``)."""
        static = self.pyproject["project"].get("version")
        if static:
            return static
        text = (self.source / "__init__.py").read_text()
        return re.search(r'^__version__ = "([^"]+)"$', text, re.MULTILINE).group(1)

    def source_files(self) -> set[str]:
        """Its packages' files git tracks or would track, relative to ``source``'s parent."""
        files = set()
        for package in self.packages:
            listed = subprocess.run(
                ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "."],
                cwd=self.folder_of(package),
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split("\0")
            files |= {f"{package}/{f}" for f in listed if f}
        return {f for f in files if (self.source.parent / f).is_file()}  # not deleted ones

    def wheel(self) -> Path:
        return one(DIST.glob(f"{self.package}-{self.version}-py3-none-any.whl"))

    def sdist(self) -> Path:
        return one(DIST.glob(f"{self.package}-{self.version}.tar.gz"))


def one(paths) -> Path:
    found = sorted(paths)
    assert len(found) == 1, f"expected one file, found {found} in {DIST} (run nox -s build)"
    return found[0]


#: The plugin distributions that are no backend: the byte-level LM, the trie plugins, the
#: backend kit.
OTHER_PLUGINS = ("bytelm", "trie_numba", "trie_torch", "backend_kit")
PROJECTS = (
    Project(ROOT),
    *(Project(ROOT / "plugins" / f"genlm_{b}") for b in (*BACKENDS, *OTHER_PLUGINS)),
)


def by_name(name: str) -> Project:
    return next(p for p in PROJECTS if p.name == name)


def load_by_path(path: Path) -> ModuleType:
    """A standard-library-only module of this repository, imported by its path."""
    spec = importlib.util.spec_from_file_location(f"_release_{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def recipe(backend: str):
    """genlm-``backend``'s install recipe: ``genlm_X/install.toml`` read by genlm-core's reader."""
    reader = load_by_path(ROOT / "genlm_core" / "plugins" / "_recipe.py")
    package = f"genlm_{backend}"
    return reader.load(ROOT / "plugins" / package / "src" / package / reader.FILE)


def host() -> dict[str, object]:
    """This machine as the recipes take it: ``gpus=``, ``system=``, ``machine=``."""
    probes = load_by_path(ROOT / "genlm_core" / "plugins" / "probes.py")
    return {
        "gpus": probes.nvidia_gpu_count()[0],
        "system": platform.system(),
        "machine": platform.machine(),
    }

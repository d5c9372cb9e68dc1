"""Each direct dependency at the floor its project declares, or why not: run by ``nox -s lowest``.

Usage: ``python tests/release/floors.py [--pinned NAME ...] PROJECT[EXTRAS] ...`` (a
project folder with a pyproject.toml, e.g. ``.[assets]`` or ``plugins/genlm_hf[peft]``),
in the venv uv installed with ``--resolution lowest-direct``; ``--pinned`` names what
the session pinned instead (torch: this machine's CPU wheel), listed and not judged.

Prints, for every requirement of those projects (their dependencies and the extras
named) that applies here, the declared floor and the installed version. Exits 1 when
an installed version is above its floor: another requirement needs more, or no
release at the floor installs here; either way the tests did not run on the declared
floor, so it is not known to be true. Requirements without a floor are not judged.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ARG = re.compile(r"^(?P<folder>[^\[]+)(?:\[(?P<extras>[^\]]*)\])?$")


def requirements(arg: str) -> list[Requirement]:
    """The requirements of project ``arg`` (``folder[extra,...]``) that apply on this machine."""
    match = ARG.match(arg)
    project = tomllib.loads((Path(match["folder"]) / "pyproject.toml").read_text())["project"]
    extras = [e for e in (match["extras"] or "").split(",") if e]
    listed = [(r, "") for r in project.get("dependencies", [])]
    optional = project.get("optional-dependencies", {})
    listed += [(r, extra) for extra in extras for r in optional[extra]]
    found = [(Requirement(r), extra) for r, extra in listed]
    return [r for r, extra in found if not r.marker or r.marker.evaluate({"extra": extra})]


def floor(requirement: Requirement) -> Version | None:
    """The lowest version ``>=`` allows, if the specifier has one."""
    lows = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
    return max(lows) if lows else None


def main(args: list[str]) -> int:
    pinned = {args[i + 1] for i, a in enumerate(args) if a == "--pinned"}
    projects = [
        a for i, a in enumerate(args) if a != "--pinned" and args[i - 1 : i] != ["--pinned"]
    ]
    lifted = []
    for arg in projects:
        print(f"{arg}:")
        for requirement in requirements(arg):
            try:
                installed = Version(importlib.metadata.version(requirement.name))
            except importlib.metadata.PackageNotFoundError:
                installed = None
            low = floor(requirement)
            if requirement.name in pinned:
                verdict = "pinned by the session: its floor is not tested"
            elif installed is None:
                verdict = "NOT INSTALLED"
                lifted.append(f"{requirement} (not installed)")
            elif low is None:
                verdict = "no floor"
            elif installed == low:
                verdict = "at its floor"
            else:
                verdict = "ABOVE ITS FLOOR"
                lifted.append(f"{requirement}: {installed} installed")
            print(f"  {str(requirement):45} {str(installed):14} {verdict}")
    if lifted:
        listed = "\n  ".join(lifted)
        print(f"Floors the tests did not run on (raise each to its version here):\n  {listed}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A user's fresh virtual environment, and the README's blocks to run in it.

Shared by ``tests/install`` (the README's install section, from the checkout) and
``tests/release`` (the built wheels, from ``dist/``). The README blocks marked
``<!-- test: NAME -->`` are run as they are written.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

__all__ = ["ROOT", "bash", "create_venv", "readme_block", "run_python", "user_env"]

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"<!-- test: (\S+) -->\n```(\w+)\n(.*?)```", re.DOTALL)


def readme_block(name: str) -> str:
    """The README's code block marked ``<!-- test: name -->``."""
    blocks = {n: body for n, _, body in BLOCK.findall((ROOT / "README.md").read_text())}
    return blocks[name]


def user_env(venv: Path, **extra: str) -> dict[str, str]:
    """A user's shell with ``venv`` activated: no nox venv, no genlm or hub settings."""
    skip = ("GENLM_", "HF_HUB_OFFLINE", "VIRTUAL_ENV", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
    path = [p for p in env["PATH"].split(os.pathsep) if not p.startswith(sys.prefix)]
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *path])
    env["VIRTUAL_ENV"] = str(venv)
    return {**env, **extra}


def create_venv(path: Path) -> Path:
    """A new venv at ``path`` made by the ``python3`` a user's shell finds (not nox's)."""
    python3 = subprocess.run(
        ["bash", "-c", "command -v python3"], env=user_env(path), capture_output=True, text=True
    ).stdout.strip()
    subprocess.run([python3, "-m", "venv", str(path)], check=True, timeout=300)
    return path


def bash(
    script: str, venv: Path, timeout: int, cwd: Path = ROOT, **extra: str
) -> subprocess.CompletedProcess[str]:
    """``script`` run by bash (``set -euo pipefail``) in a user's shell with ``venv`` active."""
    return subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + script],
        cwd=cwd,
        env=user_env(venv, **extra),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_python(
    code: str, venv: Path, folder: Path, timeout: int = 900, **extra: str
) -> subprocess.CompletedProcess[str]:
    """``code`` saved as a script in ``folder`` and run there by the venv's Python."""
    script = folder / "snippet.py"
    script.write_text(code)
    return subprocess.run(
        [str(venv / "bin" / "python"), str(script)],
        cwd=folder,
        env=user_env(venv, **extra),
        capture_output=True,
        text=True,
        timeout=timeout,
    )

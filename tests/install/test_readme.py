"""README.md's install section, run as written in a fresh virtual environment.

``nox -s install`` runs this (not a default session: ~3-5 min here, most of it
installing torch and the core's dependencies into the new venv from a warm pip cache).
The README blocks marked ``<!-- test: NAME -->`` are run as they are: ``install`` (with
the venv's bin first on PATH, from the repository root, as the README says), then
``snippet`` with the venv's Python, then ``cli``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"<!-- test: (\S+) -->\n```(\w+)\n(.*?)```", re.DOTALL)


def readme_block(name: str) -> str:
    blocks = {n: body for n, _, body in BLOCK.findall((ROOT / "README.md").read_text())}
    return blocks[name]


def user_env(venv: Path) -> dict[str, str]:
    """A user's shell with ``venv`` activated: no nox venv, no genlm or hub settings."""
    skip = ("GENLM_", "HF_HUB_OFFLINE", "VIRTUAL_ENV", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
    path = [p for p in env["PATH"].split(os.pathsep) if not p.startswith(sys.prefix)]
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *path])
    env["VIRTUAL_ENV"] = str(venv)
    return env


def bash(script: str, venv: Path, timeout: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + script],
        cwd=ROOT,
        env=user_env(venv),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A fresh venv with the README's install section run in it."""
    path = tmp_path_factory.mktemp("readme") / "venv"
    base = user_env(path)
    python3 = subprocess.run(
        ["bash", "-c", "command -v python3"], env=base, capture_output=True, text=True
    ).stdout.strip()
    subprocess.run([python3, "-m", "venv", str(path)], check=True, timeout=300)
    done = bash(readme_block("install"), path, timeout=1800)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return path


def test_install_section_installs_the_core_and_hf(venv):
    done = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import genlm_core, genlm_hf, torch; print(torch.__version__)",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("2.13.0")  # the CPU torch the README installs first


def run_python_block(name: str, venv: Path, tmp_path: Path) -> str:
    """README's ``name`` block run with the venv's Python; its standard output."""
    script = tmp_path / f"{name}.py"
    script.write_text(readme_block(name))
    done = subprocess.run(
        [str(venv / "bin" / "python"), str(script)],
        env=user_env(venv),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_snippet_runs_as_written(venv, tmp_path):
    assert run_python_block("snippet", venv, tmp_path) == " Paris\n"


def test_bytes_snippet_runs_as_written(venv, tmp_path):
    out = run_python_block("bytes-snippet", venv, tmp_path)
    assert out.startswith("Chart {\n  b'n': ")  # the healed next byte, most likely
    assert out.strip().splitlines()[-1] == "b'nce is Paris. It is '"


def test_cli_commands_run_as_written(venv):
    done = bash(readme_block("cli"), venv, timeout=900)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "smollm2-135m-instruct" in out and "Automatic choice here: hf" in out
    assert '"backends": [' in out and "transformers:" in out

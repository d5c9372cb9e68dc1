"""README.md's install section, run as written in a fresh virtual environment.

``nox -s install`` runs this (not a default session: ~3-5 min here, most of it
installing torch and the core's dependencies into the new venv from a warm pip cache).
The README blocks marked ``<!-- test: NAME -->`` are run as they are: ``install`` (with
the venv's bin first on PATH, from the repository root, as the README says), then
``snippet`` with the venv's Python, then ``cli``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from fresh_venv import bash, create_venv, readme_block, run_python


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A fresh venv with the README's install section run in it."""
    path = create_venv(tmp_path_factory.mktemp("readme") / "venv")
    done = bash(readme_block("install"), path, timeout=1800)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return path


def test_install_section_installs_the_core_its_tries_and_hf(venv):
    done = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import genlm_core, genlm_hf, genlm_trie_numba, torch; print(torch.__version__)",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("2.13.0")  # the CPU torch the README installs first


def run_python_block(name: str, venv: Path, tmp_path: Path) -> str:
    """README's ``name`` block run with the venv's Python; its standard output."""
    done = run_python(readme_block(name), venv, tmp_path)
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

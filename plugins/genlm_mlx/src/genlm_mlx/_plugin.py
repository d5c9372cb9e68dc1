"""Entry point of genlm-mlx: registers the ``mlx`` backend.

genlm imports this module whenever backends are listed or loaded, so it imports only
``genlm_core.plugins`` and the standard library. mlx and mlx-lm are imported by
``genlm_mlx.lm``, and only when a user loads the backend.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from pathlib import Path

from genlm_core.plugins import (
    Availability,
    BackendSpec,
    hookimpl,
    is_apple_silicon,
    module_available,
)
from genlm_core.plugins.official import install_hint

#: The backend this plugin registers (its entry point's name in the pyproject).
BACKEND = "mlx"

MODEL_MODULE = "genlm_mlx.lm"
#: (distribution, module) of the engine; ``mlx.core`` because ``mlx`` is a namespace package.
ENGINE_MODULES = (("mlx", "mlx.core"), ("mlx-lm", "mlx_lm"))


def linux_runtime() -> str | None:
    """The installed Linux compute library of MLX (``mlx-cpu``, ``mlx-cuda-*``), or None.

    On Linux the ``mlx`` wheel holds only bindings; ``import mlx.core`` fails unless one
    of these distributions is installed. Read from package metadata, without importing.
    """
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name == "mlx-cpu" or name.startswith("mlx-cuda"):
            return f"{name} {dist.version}"
    return None


def fast_blas_installed() -> bool:
    """Whether `genlm_mlx._blas` has a fast CBLAS to load.

    That is the ``mkl`` wheel's, or the library ``GENLM_MLX_BLAS`` names (``off`` keeps
    mlx's own).
    """
    setting = os.environ.get("GENLM_MLX_BLAS", "").strip()
    if setting:
        return setting.lower() not in ("off", "0", "none", "false")
    return any(
        (Path(root) / "lib" / "libmkl_rt.so.3").exists() for root in {sys.prefix, sys.base_prefix}
    )


def check() -> Availability:
    """Whether ``mlx`` can run here: mlx, mlx-lm and a device for them are installed.

    On macOS that needs Apple silicon; on Linux, mlx's CPU or CUDA library (there the
    backend is available but chosen only when named). Cheap: modules are looked up with
    ``importlib.util.find_spec``, never imported.
    """
    reasons = []
    system = platform.system()
    note = "Apple silicon (Metal)"
    if system == "Darwin" and not is_apple_silicon():
        reasons.append(f"MLX needs Apple silicon; this Mac is {platform.machine()}")
    elif system not in ("Darwin", "Linux"):
        reasons.append(f"MLX runs on macOS (Apple silicon) and Linux, not {system}")
    missing = [dist for dist, module in ENGINE_MODULES if not module_available(module)]
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        reasons.append(f"{' and '.join(missing)} {verb} not installed: {install_hint(BACKEND)}")
    elif system == "Linux":
        runtime = linux_runtime()
        if runtime is None:
            reasons.append(
                "mlx is installed without a Linux compute library; "
                "pip install 'mlx[cpu]' (or 'mlx[cuda]' for NVIDIA GPUs)"
            )
        else:
            note = f"Linux ({runtime}); used only when named: backend='mlx'"
            if runtime.startswith("mlx-cpu") and not fast_blas_installed():
                note += "; slow reference BLAS: pip install 'genlm-mlx[mkl]'"
    if reasons:
        return Availability.no("; ".join(reasons))
    return Availability.yes(note)


@hookimpl
def genlm_register_backends(register):
    """Register the ``mlx`` backend (automatic only on Apple silicon)."""
    register(
        BackendSpec(
            name=BACKEND,
            loader=f"{MODEL_MODULE}:AsyncMlxLM.from_name",
            priority=80,
            check=check,
            auto=is_apple_silicon(),
            description="MLX (mlx-lm) on Apple silicon; on Linux only when named",
            install_hint=install_hint(BACKEND),
        )
    )

"""A fast BLAS for mlx's Linux CPU build, loaded before mlx is imported.

Why: the ``mlx-cpu`` wheel bundles the reference (netlib) BLAS, so a matrix product
on Linux is 20-30x slower than it should be (a SmolLM2-135M forward over 32 tokens:
3 s instead of 0.13 s). ``libmlx.so`` resolves ``cblas_sgemm`` and friends through the
dynamic linker, and the linker searches the process's *global* scope before a
library's own dependencies. So loading a library that exports unprefixed ``cblas_*``
symbols with ``RTLD_GLOBAL`` *before* ``import mlx.core`` makes mlx use it, exactly
like ``LD_PRELOAD`` would, without the user setting anything.

The library comes from the registry-installable ``mkl`` wheel (``pip install
'genlm-mlx[mkl]'``; it puts ``libmkl_rt.so.3`` in ``<prefix>/lib``). OpenBLAS wheels
for Python packaging (``scipy-openblas32``) prefix their symbols and cannot serve.
Set ``GENLM_MLX_BLAS`` to a library path to use another one, or to ``off`` to keep
mlx's own. On macOS, Accelerate is already fast: nothing is done there.
"""

from __future__ import annotations

import ctypes
import os
import sys
import sysconfig
from pathlib import Path

__all__ = ["BLAS_ENV", "blas_status", "load_fast_blas"]

#: Environment variable: a BLAS library path, or ``off``.
BLAS_ENV = "GENLM_MLX_BLAS"

_MKL_NAMES = ("libmkl_rt.so.3", "libmkl_rt.so.2", "libmkl_rt.so")

_status: str | None = None


def _candidates() -> list[Path]:
    """Where the ``mkl`` wheel puts its libraries: the environment's ``lib`` folders."""
    roots = {Path(sys.prefix), Path(sys.base_prefix), Path(sysconfig.get_path("data"))}
    return [root / "lib" / name for root in sorted(roots) for name in _MKL_NAMES]


def load_fast_blas() -> str:
    """Load a fast BLAS globally if mlx is not imported yet; return what happened.

    Idempotent and cheap after the first call. Never raises: a failure leaves mlx's
    bundled BLAS in place and is reported in the returned status.
    """
    global _status
    if _status is not None:
        return _status
    _status = _load()
    return _status


def blas_status() -> str:
    """What [`load_fast_blas`][] did (``"not attempted"`` before it ran)."""
    return _status or "not attempted"


def _load() -> str:
    if not sys.platform.startswith("linux"):
        return f"not needed on {sys.platform}"
    setting = os.environ.get(BLAS_ENV, "").strip()
    if setting.lower() in ("off", "0", "none", "false"):
        return f"off ({BLAS_ENV}={setting})"
    if "mlx.core" in sys.modules:
        return (
            "mlx.core was imported before genlm_mlx, so mlx keeps its bundled reference "
            "BLAS (slow); import genlm_mlx.lm first, or run with "
            "LD_PRELOAD=<prefix>/lib/libmkl_rt.so.3"
        )
    paths = [Path(setting)] if setting else _candidates()
    for path in paths:
        if not path.exists():
            continue
        try:
            lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
            lib.cblas_sgemm  # noqa: B018 - must export the unprefixed CBLAS symbols
        except (OSError, AttributeError) as exc:
            if setting:
                return f"could not load {path} ({exc}); mlx keeps its bundled BLAS"
            continue
        return f"loaded {path}"
    if setting:
        return f"{BLAS_ENV}={setting} does not exist; mlx keeps its bundled BLAS"
    return (
        "no fast BLAS found; mlx-cpu uses its bundled reference BLAS (20-30x slower): "
        "pip install 'genlm-mlx[mkl]'"
    )

"""How to install genlm-mlx with its engine on a given machine: the plugin's own recipe.

genlm-core reads this module for ``genlm backends`` and for the hint of the ``mlx``
backend (imported from the installed package, or loaded by path from a checkout's
``plugins/`` folder when genlm-mlx is not installed), and the noxfile can load it by
path: so it imports only the standard library, and never genlm-core or mlx.
The machine is described by three facts: NVIDIA GPUs visible, ``platform.system()``
and ``platform.machine()``. mlx and mlx-lm are dependencies (``mlx[cpu]`` on Linux);
the extras choose a faster compute library.
"""

from __future__ import annotations

__all__ = ["AFTER_EXTRA", "BACKEND", "DISTRIBUTION", "RUNS_ON", "engine_extra"]

BACKEND = "mlx"
DISTRIBUTION = "genlm-mlx"
RUNS_ON = "Apple silicon; on Linux only when named"
#: Further ``pip install`` arguments after installing with an extra (none needed).
AFTER_EXTRA: dict[str, tuple[str, ...]] = {}


def engine_extra(*, gpus: int, system: str, machine: str) -> tuple[str | None, str]:
    """The extra that brings MLX's best compute library here, and a note on why (or why not)."""
    if system == "Darwin":
        if machine == "arm64":
            return None, ""
        return None, f"MLX needs Apple silicon; this Mac is {machine}"
    if system != "Linux":
        return None, f"MLX runs on macOS (Apple silicon) and Linux, not {system}"
    if gpus:
        return "cuda", "NVIDIA GPU found: mlx[cuda]; used only when named"
    if machine in ("x86_64", "AMD64"):
        return "mkl", "Linux x86_64: MKL's BLAS instead of mlx-cpu's slow reference BLAS"
    return None, "Linux: mlx[cpu]; used only when named"

"""How to install genlm-sgl with its engine on a given machine: the plugin's own recipe.

genlm-core reads this module for ``genlm backends`` and for the hint of the ``sgl``
backend (imported from the installed package, or loaded by path from a checkout's
``plugins/`` folder when genlm-sgl is not installed), and the noxfile can load it by
path: so it imports only the standard library, and never genlm-core or sglang.
The machine is described by three facts: NVIDIA GPUs visible, ``platform.system()``
and ``platform.machine()``.
"""

from __future__ import annotations

__all__ = ["AFTER_EXTRA", "BACKEND", "DISTRIBUTION", "RUNS_ON", "SGLANG_CPU", "engine_extra"]

BACKEND = "sgl"
DISTRIBUTION = "genlm-sgl"
RUNS_ON = "NVIDIA GPUs (SGLang); a Linux x86_64 CPU when named (SGLang's torch-native path)"
#: The SGLang release of the CPU recipe: installed without its dependencies, because it
#: pins torch 2.14.1 and CUDA-only packages that would replace the CPU torch.
SGLANG_CPU = "sglang==0.5.23"
#: Further ``pip install`` arguments after installing with an extra.
AFTER_EXTRA: dict[str, tuple[str, ...]] = {"cpu": ("--no-deps", SGLANG_CPU)}


def engine_extra(*, gpus: int, system: str, machine: str) -> tuple[str | None, str]:
    """The extra that brings SGLang on this machine, and a note on why (or why not)."""
    if gpus:
        return "cuda", ""
    if system == "Linux" and machine in ("x86_64", "AMD64"):
        return "cpu", (
            "no NVIDIA GPU: SGLang's CPU path, used only when named; its [cuda] extra "
            "would replace the CPU torch. sglang also imports torchvision and sgl_kernel, "
            "which have no CPU build on PyPI: see genlm-sgl's README, 'On a CPU'"
        )
    return None, f"SGLang needs an NVIDIA GPU or a Linux x86_64 CPU; this is {system} {machine}"

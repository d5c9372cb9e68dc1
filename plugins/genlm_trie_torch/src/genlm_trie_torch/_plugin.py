"""Entry point of genlm-trie-torch: registers the ``torch-cuda`` trie in ``genlm.tries``.

genlm imports this module whenever tries are listed or built, so it imports only
``genlm_core.plugins`` and asks NVML (not torch) whether a GPU is there.
"""

from __future__ import annotations

from genlm_core.plugins import Availability, TrieSpec, hookimpl, module_available
from genlm_core.plugins.probes import nvidia_gpu_count


def _cuda_available() -> Availability:
    gpus, why = nvidia_gpu_count()
    if not gpus:
        return Availability.no(f"requires an NVIDIA GPU: {why}")
    if not module_available("torch"):
        return Availability.no("requires torch with CUDA: pip install torch")
    return Availability.yes("CUDA")


@hookimpl
def genlm_register_tries(register):
    """Register the ``torch-cuda`` trie."""
    register(
        TrieSpec(
            name="torch-cuda",
            loader="genlm_trie_torch.torch_trie:cuda_trie",
            priority=50,
            check=_cuda_available,
            description="torch sparse products on a CUDA GPU, float32 (below numba: "
            "model outputs arrive on the CPU)",
        )
    )

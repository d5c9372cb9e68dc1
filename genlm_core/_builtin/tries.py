"""Built-in trie implementations, registered in ``genlm.tries`` like any plugin.

Only spec strings here: nothing is imported until a trie is built. ``kind`` is
``"character"`` unless given.
"""

from __future__ import annotations

from genlm_core.plugins import Availability, TrieSpec, hookimpl, module_available
from genlm_core.plugins.probes import nvidia_gpu_count


def _numba_available() -> Availability:
    if not module_available("numba"):
        return Availability.no("needs numba: pip install numba")
    return Availability.yes("CPU, numba")


def _cuda_available() -> Availability:
    gpus, why = nvidia_gpu_count()
    if not gpus:
        return Availability.no(f"requires an NVIDIA GPU: {why}")
    if not module_available("torch"):
        return Availability.no("requires torch with CUDA: pip install torch")
    return Availability.yes("CUDA")


_SPECS = (
    TrieSpec(
        name="numba",
        loader="genlm_core.trie.cpu:TokenCharacterTrie",
        priority=100,
        check=_numba_available,
        description="flat arrays + exact numba kernels, batches parallel across cores",
    ),
    TrieSpec(
        name="torch-cuda",
        loader="genlm_core.trie.torch_trie:cuda_trie",
        priority=50,
        check=_cuda_available,
        description="torch sparse products on a CUDA GPU, float32 (below numba: "
        "model outputs arrive on the CPU)",
    ),
    TrieSpec(
        name="reference",
        loader="genlm_core.trie.reference:ReferenceTokenCharacterTrie",
        priority=10,
        description="dicts + NumPy: slow, simple, the oracle for the others",
    ),
    # genlm-backend's AsyncTokenCharacterTrie.from_vocab(backend=...) names.
    TrieSpec(
        name="sequential",
        loader="genlm_core.trie.cpu:TokenCharacterTrie",
        auto=False,
        check=_numba_available,
        description="genlm-backend name: TokenCharacterTrie (same as numba)",
    ),
    TrieSpec(
        name="parallel",
        loader="genlm_core.trie.cpu:ParallelTokenCharacterTrie",
        auto=False,
        check=_numba_available,
        description="genlm-backend name: ParallelTokenCharacterTrie (float32; CUDA when available)",
    ),
    TrieSpec(
        name="numba-byte",
        loader="genlm_core.trie.byte_trie:TokenByteTrie",
        priority=100,
        check=_numba_available,
        kind="byte",
        description="genlm-bytes' TokenByteTrie (EOS modes, token-id weights) on the numba kernels",
    ),
)


@hookimpl
def genlm_register_tries(register):
    """Register the built-in trie implementations."""
    for spec in _SPECS:
        register(spec)

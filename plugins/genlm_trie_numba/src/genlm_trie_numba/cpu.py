"""The default tries: flat arrays and numba kernels on the CPU.

``TokenCharacterTrie`` and ``ParallelTokenCharacterTrie`` keep genlm-backend 0.3.1's
names, signatures, node numbering and result types.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from genlm_core.trie.arrays import TrieArrays
from genlm_core.trie.base import CharacterTrieBase
from genlm_core.trie.vocab import EncodedVocab
from genlm_trie_numba import _kernels
from genlm_trie_numba._build import build_trie_arrays, plan_masses
from genlm_trie_numba._outputs import BatchOutputs

__all__ = ["ParallelTokenCharacterTrie", "TokenCharacterTrie"]


class TokenCharacterTrie(CharacterTrieBase):
    """Token weights -> masses of every prefix, on the CPU (numba, exact float64 sums).

    Node numbering and the dict attributes are genlm-backend 0.3.1's, so its results
    index the same way; the rows of a batch are spread over the cores. Arguments: see
    [`CharacterTrieBase`][genlm_core.trie.base.CharacterTrieBase].

    Example::

        trie = TokenCharacterTrie(lm.byte_vocab)
        mass = trie.weight_sum(np.exp(logprobs))   # mass[trie.root] == 1.0
    """

    def _build(self, vocab: EncodedVocab) -> TrieArrays:
        arrays = build_trie_arrays(vocab.codes, vocab.offsets)
        self._plan = plan_masses(arrays)
        self._batch_outputs = BatchOutputs(arrays.num_nodes, self.out_dtype)
        return arrays

    def _fill_one(self, op: str, ws: np.ndarray) -> tuple[np.ndarray, int]:
        masses, bad = _kernels.fill_batch(self._plan, op, ws[None], self.out_dtype)
        return masses[0], int(bad[0])

    def _fill(self, op: str, ws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out = self._batch_outputs.empty(ws.shape[0])
        return _kernels.fill_batch(self._plan, op, ws, self.out_dtype, out)


class ParallelTokenCharacterTrie(TokenCharacterTrie):
    """genlm-backend's ``ParallelTokenCharacterTrie``: masses as float32.

    On the CPU (``device`` None or ``"cpu"`` when no GPU is usable) this is the
    numba implementation, computing in float64 and rounding once; with
    ``device="cuda"`` it returns the ``torch-cuda`` trie, genlm-trie-torch's
    ``TorchTokenCharacterTrie``.

    Args:
        device: ``None`` (a CUDA GPU if torch sees one, else the CPU), ``"cpu"`` or
            ``"cuda"``.

    Raises:
        ValueError: ``device`` is not None, ``"cpu"`` or ``"cuda"``.
        BackendUnavailableError: ``device="cuda"`` but torch sees no CUDA GPU.
        UnknownBackendError: ``device="cuda"`` without genlm-trie-torch installed.
    """

    out_dtype = np.float32

    def __new__(cls, decode: Sequence[Any], device: str | None = None, **kwargs: Any) -> Any:
        """Hand CUDA devices to the torch implementation, as genlm-backend ran on the GPU."""
        if resolve_device(device) == "cuda" and cls is ParallelTokenCharacterTrie:
            return _cuda_trie(decode, **kwargs)
        return super().__new__(cls)

    def __init__(self, decode: Sequence[Any], device: str | None = None) -> None:
        self.device = resolve_device(device)
        super().__init__(decode)


def _cuda_trie(decode: Sequence[Any], **kwargs: Any) -> Any:
    """The ``torch-cuda`` trie of genlm-trie-torch, through the registry (no import of it).

    Raises:
        UnknownBackendError: genlm-trie-torch is not installed; says what to install.
    """
    from genlm_core.plugins import TrieRegistry, get_plugin_manager

    registration = TrieRegistry(get_plugin_manager()).get("torch-cuda")
    return registration.spec.load()(decode, device="cuda", **kwargs)


def resolve_device(device: str | None, auto: bool = True) -> str:
    """``"cpu"`` or ``"cuda"``; None is CUDA when torch sees a GPU if ``auto``, else the CPU.

    Raises:
        ValueError: ``device`` is not None, ``"cpu"`` or ``"cuda"``.
        BackendUnavailableError: ``device="cuda"`` but torch sees no CUDA GPU.
    """
    if device is None:
        from genlm_core.plugins import has_nvidia_gpu

        if auto and has_nvidia_gpu():
            import torch

            return "cuda" if torch.cuda.is_available() else "cpu"
        return "cpu"
    if device not in ("cpu", "cuda"):
        raise ValueError(f"invalid device {device!r}: must be 'cpu', 'cuda' or None")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            from genlm_core.errors import BackendUnavailableError

            raise BackendUnavailableError(
                f"device='cuda' was requested but torch {torch.__version__} sees no CUDA GPU; "
                f"pass device='cpu'{' (or None to pick automatically)' if auto else ' or None'}"
            )
    return device

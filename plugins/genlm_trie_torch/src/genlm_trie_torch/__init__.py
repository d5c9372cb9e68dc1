"""genlm-trie-torch: a token trie whose masses torch computes on a CUDA GPU.

:class:`TorchTokenCharacterTrie` turns token weights into the mass of every byte
prefix with sparse products on the device (float32). Installing this distribution
registers it as the ``torch-cuda`` trie through the ``genlm.tries`` entry point
(:mod:`genlm_trie_torch._plugin`); it is ranked below ``numba`` (model outputs arrive on
the CPU), so name it: ``AsyncTokenCharacterTrie.from_vocab(vocab, backend="torch-cuda")``.
genlm-core keeps its old import path, ``genlm_core.trie.TorchTokenCharacterTrie``.

Names load lazily, so the entry-point module imports neither torch nor numba.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: Public name -> the module it is imported from on first use.
_EXPORTS = {
    "CHUNK_BYTES": "genlm_trie_torch.torch_trie",
    "TorchTokenCharacterTrie": "genlm_trie_torch.torch_trie",
    "cuda_trie": "genlm_trie_torch.torch_trie",
}

__all__ = ["CHUNK_BYTES", "TorchTokenCharacterTrie", "cuda_trie"]

if TYPE_CHECKING:  # what static tools (type checkers, the docs' API pages) see
    from genlm_trie_torch.torch_trie import CHUNK_BYTES, TorchTokenCharacterTrie, cuda_trie


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'genlm_trie_torch' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return list(__all__)

"""genlm-trie-torch: a token trie whose masses torch computes on a CUDA GPU.

[`TorchTokenCharacterTrie`][] turns token weights into the mass of every byte
prefix with sparse products on the device (float32). Installing this distribution
registers it as the ``torch-cuda`` trie through the ``genlm.tries`` entry point
(`genlm_trie_torch._plugin`); it is ranked below ``numba`` (model outputs arrive on
the CPU), so name it: ``AsyncTokenCharacterTrie.from_vocab(vocab, backend="torch-cuda")``.
genlm-core keeps its old import path, ``genlm_core.trie.TorchTokenCharacterTrie``.

Names load lazily, so the entry-point module imports neither torch nor numba.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from genlm_core.lazy import lazy_exports

__version__ = "0.1.0"

__all__ = ["CHUNK_BYTES", "TorchTokenCharacterTrie", "cuda_trie"]

if TYPE_CHECKING:  # what static tools (type checkers, the docs' API pages) see
    from genlm_trie_torch.torch_trie import CHUNK_BYTES, TorchTokenCharacterTrie, cuda_trie


__getattr__, __dir__ = lazy_exports(globals())

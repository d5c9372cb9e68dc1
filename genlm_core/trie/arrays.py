"""The flat arrays every trie implementation fills: the core's shared trie layout.

NumPy only: the reference trie builds them in Python, the plugins' (``genlm-trie-numba``)
with compiled kernels; [`CharacterTrieBase`][genlm_core.trie.base.CharacterTrieBase] and the views
read them whichever built them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["TrieArrays"]


@dataclass(frozen=True)
class TrieArrays:
    """The trie, node-indexed in genlm-backend's post-order numbering.

    Attributes:
        parent: ``parent[v]`` (int32), ``-1`` for the root; always ``parent[v] > v``.
        label: Edge code into ``v`` (int32): a byte or letter code, ``-1`` for a leaf edge.
        leaf_token: Vocabulary position of leaf ``v`` (int32), ``-1`` for inner nodes.
        child_ptr: CSR row pointers (int64, ``N + 1``) into ``child_idx``.
        child_idx: Children of each node, ascending (int32).
        token_leaf: Leaf node of each vocabulary position (int32).
        duplicates: ``(i, j)`` pairs (int64) of vocabulary positions with equal words.
    """

    parent: np.ndarray
    label: np.ndarray
    leaf_token: np.ndarray
    child_ptr: np.ndarray
    child_idx: np.ndarray
    token_leaf: np.ndarray
    duplicates: np.ndarray

    @property
    def num_nodes(self) -> int:
        """Number of nodes, leaves included."""
        return int(self.parent.shape[0])

    @property
    def root(self) -> int:
        """The root is numbered last, as in genlm-backend."""
        return self.num_nodes - 1

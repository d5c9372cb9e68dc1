"""A trie whose masses are computed by torch on a device (meant for CUDA).

The structure is built on the CPU (numba, flat arrays). Each vocabulary entry is
then linked to its leaf and every ancestor: the sum is one sparse-dense product
with that (node x token) 0/1 matrix, the max one ``scatter_reduce("amax")``. Both
combine leaf weights directly, never subtracting, so small masses survive.

Registered as ``torch-cuda`` (available only with an NVIDIA GPU); the class also
runs on ``device="cpu"``, which is how it is tested on machines without a GPU.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from genlm_core.trie._build import TrieArrays, build_trie_arrays
from genlm_core.trie.base import CharacterTrieBase
from genlm_core.trie.vocab import EncodedVocab

__all__ = ["TorchTokenCharacterTrie", "cuda_trie"]


def _ancestor_pairs(arrays: TrieArrays) -> tuple[np.ndarray, np.ndarray]:
    """``(token, node)`` for every vocabulary entry and each node on its root path."""
    token_leaf = arrays.token_leaf.astype(np.int64)
    parent = arrays.parent.astype(np.int64)
    tokens = [np.arange(len(token_leaf), dtype=np.int64)]
    nodes = [token_leaf]
    cur, who = token_leaf, tokens[0]
    while cur.size:
        up = parent[cur]
        keep = up >= 0
        cur, who = up[keep], who[keep]
        tokens.append(who)
        nodes.append(cur)
    return np.concatenate(tokens), np.concatenate(nodes)


class TorchTokenCharacterTrie(CharacterTrieBase):
    """Token weights -> node masses with torch on ``device``; results are NumPy arrays.

    Args:
        decode: The vocabulary; entry ``i`` gets weight ``ws[i]``.
        device: A torch device (``"cuda"``, ``"cuda:1"``, ``"cpu"``); default CUDA
            when available, else the CPU.
        dtype: Compute and result dtype (float32 by default, as genlm-backend's
            ``ParallelTokenCharacterTrie``; float64 for exact-as-CPU results).
        max_batch_size: Largest batch sent to the device at once.
    """

    def __init__(
        self,
        decode: Sequence[Any],
        device: str | torch.device | None = None,
        dtype: torch.dtype = torch.float32,
        max_batch_size: int = 64,
    ) -> None:
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        self.dtype = dtype
        self.out_dtype = np.float32 if dtype == torch.float32 else np.float64
        self.max_batch_size = max_batch_size
        super().__init__(decode)
        tokens, nodes = _ancestor_pairs(self._arrays)
        n_tokens, n_nodes = len(self._arrays.token_leaf), self.num_nodes
        order = np.lexsort((tokens, nodes))  # CSR rows = nodes
        crow = np.zeros(n_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(nodes, minlength=n_nodes), out=crow[1:])
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
            self._reach = torch.sparse_csr_tensor(
                torch.from_numpy(crow),
                torch.from_numpy(tokens[order]),
                torch.ones(len(order), dtype=dtype),
                size=(n_nodes, n_tokens),
                check_invariants=False,
            ).to(self.device)
        self._src = torch.from_numpy(tokens).to(self.device)
        self._dst = torch.from_numpy(nodes).to(self.device)

    def _build(self, vocab: EncodedVocab) -> TrieArrays:
        return build_trie_arrays(vocab.codes, vocab.offsets)

    def _fill(self, op: str, ws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        parts, bads = [], []
        for lo in range(0, ws.shape[0], self.max_batch_size):
            w = torch.from_numpy(ws[lo : lo + self.max_batch_size]).to(self.device, self.dtype)
            nan = torch.isnan(w)
            first = nan.int().argmax(dim=1) if w.shape[1] else torch.zeros(len(w), dtype=torch.long)
            bads.append(torch.where(nan.any(dim=1), first, -1))
            if op == "sum":
                out = (self._reach @ w.T).T
            else:
                shape = (w.shape[0], self.num_nodes)
                out = torch.full(shape, -torch.inf, dtype=self.dtype, device=self.device)
                out.scatter_reduce_(
                    1,
                    self._dst.expand(w.shape[0], -1),
                    w[:, self._src],
                    reduce="amax",
                    include_self=False,
                )
            parts.append(out)
        masses = torch.cat(parts).cpu().numpy()
        bad = torch.cat(bads).cpu().numpy()
        return np.ascontiguousarray(masses), bad


def cuda_trie(decode: Sequence[Any], **kwargs: Any) -> TorchTokenCharacterTrie:
    """The ``torch-cuda`` registration: a :class:`TorchTokenCharacterTrie` on CUDA."""
    kwargs.setdefault("device", "cuda")
    return TorchTokenCharacterTrie(decode, **kwargs)

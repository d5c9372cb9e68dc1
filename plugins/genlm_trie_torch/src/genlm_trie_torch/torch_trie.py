"""A trie whose masses are computed by torch on a device (meant for CUDA).

Sums are sparse products, maxima ``scatter_reduce``; on CUDA a batch is computed in
chunks whose copies to page-locked host memory overlap the next chunk's compute
(docs/tries.md). Registered as ``torch-cuda``; also runs on ``device="cpu"``. The
trie is built, and its host outputs recycled, by genlm-trie-numba's builder.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from genlm_core.checks import is_int_at_least
from genlm_core.trie.arrays import TrieArrays
from genlm_core.trie.base import CharacterTrieBase
from genlm_core.trie.errors import InvalidWeightsError
from genlm_core.trie.vocab import EncodedVocab
from genlm_core.trie.weights import check_batch, check_vector, real_tensor
from genlm_trie_numba import BatchOutputs, build_trie_arrays

__all__ = ["CHUNK_BYTES", "TorchTokenCharacterTrie", "cuda_trie"]

#: Bytes of masses per device chunk when ``max_batch_size`` is None: launch costs are
#: small next to its copy (0.6 ms at 50 GB/s), and only one chunk's compute is exposed.
CHUNK_BYTES = 32 << 20

#: Device buffers per call: chunk k+1 (and k+2) are computed while k is copied out.
RING = 3

#: Longest row of the sparse product: longer rows (the root's holds every entry) are cut
#: into pieces added to their node by a second, small product (why: docs/tries.md).
ROW_LIMIT = 1024


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


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concatenate([arange(s, s + n) for s, n in zip(starts, lengths)])``, vectorised."""
    total = int(lengths.sum())
    shift = np.repeat(starts - np.cumsum(lengths) + lengths, lengths)
    return shift + np.arange(total, dtype=np.int64)


def _split_rows(crow: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cut CSR rows longer than ``limit``: the first piece stays, the rest become new rows.

    Returns ``(crow, entries, owners)``: the new row pointers (the N rows, then the pieces),
    which old entry each new entry is, and the row each appended piece belongs to.
    """
    lengths = np.diff(crow)
    extra = np.maximum(0, (lengths - 1) // limit)  # pieces beyond the first
    owners = np.repeat(np.arange(len(lengths)), extra)
    cut = extra[extra > 0]
    piece = _ranges(np.ones(len(cut), dtype=np.int64), cut)  # 1, 2, ... within each row
    starts = crow[owners] + piece * limit
    ends = np.minimum(starts + limit, crow[owners + 1])
    first = np.minimum(lengths, limit)
    new_lengths = np.concatenate([first, ends - starts])
    new_crow = np.zeros(len(new_lengths) + 1, dtype=np.int64)
    np.cumsum(new_lengths, out=new_crow[1:])
    entries = np.concatenate([_ranges(crow[:-1], first), _ranges(starts, ends - starts)])
    return new_crow, entries, owners


def _pinned(n: int, dtype: torch.dtype) -> np.ndarray:
    """``n`` values of page-locked host memory, as a NumPy array (for ``BatchOutputs``)."""
    return torch.empty(n, dtype=dtype, pin_memory=True).numpy()


def _first_nan(row: Any) -> int:
    if isinstance(row, torch.Tensor):
        return int(torch.isnan(row).nonzero()[0, 0])
    return int(np.flatnonzero(np.isnan(row))[0])


class TorchTokenCharacterTrie(CharacterTrieBase):
    """Token weights -> node masses with torch on ``device``; results are NumPy arrays.

    Weights may be NumPy arrays, CPU tensors, or tensors already on ``device`` (a GPU
    model's log-probs), which are used where they are. A returned array belongs to
    the caller: its memory is recycled only once nothing references it.

    float32 by default, as genlm-backend's ``ParallelTokenCharacterTrie``. Maxima are
    exact. A sum of a node's ``n`` entries, in any order, is within about
    ``n * 2**-24`` of its exact value relative to the mass; genlm-backend adds in
    another order, so sums agree with it to that bound, not bit for bit.

    Args:
        device: A torch device (``"cuda"``, ``"cuda:1"``, ``"cpu"``); default CUDA
            when available, else the CPU.
        dtype: Compute and result dtype (float32 by default; float64 for
            exact-as-CPU results).
        max_batch_size: Most distributions computed on the device at once (one
            chunk). None: as many as give about ``CHUNK_BYTES`` of masses.

    Raises:
        ValueError: ``max_batch_size`` is neither None nor an integer >= 1.
    """

    def __init__(
        self,
        decode: Sequence[Any],
        device: str | torch.device | None = None,
        dtype: torch.dtype = torch.float32,
        max_batch_size: int | None = None,
    ) -> None:
        if max_batch_size is not None and not is_int_at_least(max_batch_size, 1):
            raise ValueError(
                f"max_batch_size must be None or an integer >= 1, got {max_batch_size!r}"
            )
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        self.dtype = dtype
        self.out_dtype = np.float32 if dtype == torch.float32 else np.float64
        self.max_batch_size = max_batch_size
        super().__init__(decode)
        tokens, nodes = _ancestor_pairs(self._arrays)
        n_tokens, n_nodes = len(self._arrays.token_leaf), self.num_nodes
        index = torch.int32 if len(tokens) < 2**31 else torch.int64
        order = np.lexsort((tokens, nodes))  # CSR rows = nodes
        crow = np.zeros(n_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(nodes, minlength=n_nodes), out=crow[1:])
        crow, entries, owners = _split_rows(crow, ROW_LIMIT)
        self._reach = _csr(crow, tokens[order][entries], n_tokens, dtype, index, self.device)
        self._pieces = self._heavy = None
        if len(owners):  # piece k of row owners[k] -> its node: a (heavy nodes x pieces) sum
            heavy, counts = np.unique(owners, return_counts=True)
            pointers = np.concatenate([[0], np.cumsum(counts)])
            pieces = np.arange(len(owners))
            self._pieces = _csr(pointers, pieces, len(owners), dtype, index, self.device)
            self._heavy = torch.from_numpy(heavy).to(self.device)
        self._src = torch.from_numpy(tokens).to(self.device)
        self._dst = torch.from_numpy(nodes).to(self.device)
        # Page-locking is slow (a cudaHostAlloc of hundreds of MB): blocks are recycled.
        cuda = self.device.type == "cuda"
        pinned = functools.partial(_pinned, dtype=dtype) if cuda else None
        self._outputs = BatchOutputs(n_nodes, self.out_dtype, allocate=pinned)
        self._stages = BatchOutputs(n_tokens, self.out_dtype, allocate=pinned) if cuda else None
        self._copy_stream = torch.cuda.Stream(self.device) if cuda else None

    def _build(self, vocab: EncodedVocab) -> TrieArrays:
        return build_trie_arrays(vocab.codes, vocab.offsets)

    def _weights(self, ws: Any, what: str, batch: bool) -> Any:
        """Weights already on the device stay there (checked where they are)."""
        w = self._device_weights(ws, what, batch)
        return w if w is not None else super()._weights(ws, what, batch)

    def _fill(self, op: str, ws: np.ndarray | torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        masses, nan_rows = self._run(op, ws)
        bad = np.full(len(ws), -1, dtype=np.int64)
        for row in nan_rows.tolist():
            bad[row] = _first_nan(ws[row])
        return masses, bad

    def _device_weights(self, ws: Any, what: str, batch: bool) -> torch.Tensor | None:
        """``ws`` on ``device`` in ``dtype`` if it is a tensor there (or a list of them)."""
        if isinstance(ws, torch.Tensor):
            if ws.device.type != self.device.type:
                return None
            w = real_tensor(ws)
            (check_batch if batch else check_vector)(w, len(self._arrays.token_leaf), what)
            if not w.dtype.is_floating_point:
                w = w.to(torch.float64)  # integers, as on the host path
            return w.to(self.device, self.dtype)
        if (
            batch
            and isinstance(ws, list | tuple)
            and ws
            and all(isinstance(r, torch.Tensor) and r.device.type == self.device.type for r in ws)
        ):
            rows = []
            for i, row in enumerate(ws):
                try:
                    rows.append(self._device_weights(row, what, batch=False))
                except InvalidWeightsError as exc:
                    raise InvalidWeightsError(f"batch row {i}: {exc}") from None
            return torch.stack(rows)
        return None

    def _chunk_rows(self) -> int:
        if self.max_batch_size is not None:
            return self.max_batch_size
        row_bytes = self.num_nodes * torch.empty((), dtype=self.dtype).element_size()
        return max(1, CHUNK_BYTES // row_bytes)

    def _run(self, op: str, src: np.ndarray | torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """Masses of every row of ``src`` (B, V), and the rows that hold a NaN."""
        n = src.shape[0]
        masses = self._outputs.empty(n)
        host = torch.from_numpy(masses)
        flags = torch.empty(n, dtype=torch.bool, device=self.device)
        rows = self._chunk_rows()
        if self._copy_stream is None:
            for lo in range(0, n, rows):
                w = self._load(src, lo, lo + rows, None)
                flags[lo : lo + len(w)] = torch.isnan(w).any(dim=1)
                self._compute(op, w, host[lo : lo + len(w)])
            bad = flags.numpy()
        else:
            bad = self._run_cuda(op, src, host, flags, rows)
        return masses, np.flatnonzero(bad)

    def _run_cuda(
        self, op: str, src: Any, host: torch.Tensor, flags: torch.Tensor, rows: int
    ) -> np.ndarray:
        """Chunks computed on the current stream, copied out on ``_copy_stream``; one sync."""
        comp, copy = torch.cuda.current_stream(self.device), self._copy_stream
        n = host.shape[0]
        starts = range(0, n, rows)
        slots = min(RING, len(starts))
        ring = torch.empty(
            (slots, min(rows, n), self.num_nodes), dtype=self.dtype, device=self.device
        )
        computed = [torch.cuda.Event() for _ in range(slots)]
        copied = [torch.cuda.Event() for _ in range(slots)]
        # page-locked, so host weights upload asynchronously; recycled once dropped
        stage = torch.from_numpy(self._stages.empty(n)) if isinstance(src, np.ndarray) else None
        try:
            for k, lo in enumerate(starts):
                w = self._load(src, lo, lo + rows, stage)
                hi = lo + len(w)
                flags[lo:hi] = torch.isnan(w).any(dim=1)
                slot = k % slots
                if k >= slots:
                    comp.wait_event(copied[slot])  # the chunk it held has reached the host
                dst = ring[slot, : hi - lo]
                self._compute(op, w, dst)
                computed[slot].record(comp)
                copy.wait_event(computed[slot])
                with torch.cuda.stream(copy):
                    host[lo:hi].copy_(dst, non_blocking=True)
                copied[slot].record(copy)
            copy.wait_stream(comp)
            with torch.cuda.stream(copy):
                bad = flags.cpu().numpy()  # the one synchronisation: after every chunk's copy
        except BaseException:
            with contextlib.suppress(Exception):  # nothing may still write the host block
                copy.synchronize()
                comp.synchronize()
            raise
        return bad

    def _load(
        self, src: np.ndarray | torch.Tensor, lo: int, hi: int, stage: torch.Tensor | None
    ) -> torch.Tensor:
        """Rows ``lo:hi`` of ``src`` on the device, in ``dtype``."""
        if isinstance(src, torch.Tensor):
            return src[lo:hi]
        w = torch.from_numpy(src[lo:hi])
        if stage is not None:  # page-locked, so the upload below is asynchronous
            stage[lo:hi].copy_(w)
            return stage[lo:hi].to(self.device, non_blocking=True)
        return w.to(self.dtype)

    def _compute(self, op: str, w: torch.Tensor, dst: torch.Tensor) -> None:
        """Masses of the rows of ``w`` (c, V) into ``dst`` (c, N), on the device."""
        if op == "sum":
            rows = torch.mm(self._reach, w.T.contiguous())  # (N + pieces, c)
            masses = rows[: self.num_nodes]
            if self._pieces is not None:  # each heavy node once: a deterministic sum
                masses.index_add_(0, self._heavy, torch.mm(self._pieces, rows[self.num_nodes :]))
            dst.copy_(masses.T)
            return
        dst.fill_(-torch.inf)  # only a node with no entry below (an empty vocabulary's root)
        dst.scatter_reduce_(
            1, self._dst.expand(len(w), -1), w[:, self._src], reduce="amax", include_self=False
        )


def _csr(
    crow: np.ndarray,
    cols: np.ndarray,
    width: int,
    dtype: torch.dtype,
    index: torch.dtype,
    device: torch.device,
) -> torch.Tensor:
    """A 0/1 CSR matrix on ``device``."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(
            torch.from_numpy(crow).to(index),
            torch.from_numpy(cols).to(index),
            torch.ones(len(cols), dtype=dtype),
            size=(len(crow) - 1, width),
            check_invariants=False,
        ).to(device)


def cuda_trie(decode: Sequence[Any], **kwargs: Any) -> TorchTokenCharacterTrie:
    """The ``torch-cuda`` registration: a [`TorchTokenCharacterTrie`][] on CUDA."""
    kwargs.setdefault("device", "cuda")
    return TorchTokenCharacterTrie(decode, **kwargs)

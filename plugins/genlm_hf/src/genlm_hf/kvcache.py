"""PrefixKVCache: key/value tensors of token prefixes, in a radix tree over a slot pool.

The tree (segments per forward, per-adapter roots, LRU over leaves) is
[`genlm_backend_kit.PrefixTree`][]; a node's payload here is a few runs of
slots, so assembling a request's past is one copy per stored run, not one per token
and layer.

Why a slot pool. The K/V of one position, all layers stacked, is a *slot* of one
preallocated tensor of shape ``(2 * layers, heads, slots, head_dim)``; a node owns a
few runs of consecutive slots. One big allocation, grown by doubling up to the
budget, instead of thousands of small tensors: evicting and storing segments then
never fragments the process heap (with one tensor per segment, glibc's heap grew by
~200 MiB of free-but-unreturned memory over 10k sampler calls), resident memory
never exceeds the budget, and splitting a node copies nothing. Freed slots are
reused last-in first-out, so the pages touched stay few.

One tree per LoRA adapter (``None`` = the base model), one pool, budget and LRU
order across them. Not thread-safe: the model calls it under its lock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence

import torch

from genlm_backend_kit import PrefixCacheStats, PrefixTree
from genlm_core.checks import is_int_at_least
from genlm_hf._device import CPU_COPY_BYTES, index_on

__all__ = ["BATCHED_COPY_BYTES", "KVCacheStats", "PrefixKVCache", "SlotRun", "slots_of"]

SlotRun = tuple[int, int]
"""Consecutive pool slots: ``(first slot, number of slots)``."""


def slots_of(runs: Sequence[SlotRun]) -> list[int]:
    """The slots of ``runs``, in order (the positions they hold)."""
    return [s for start, n in runs for s in range(start, start + n)]


#: Largest temporary copy the batched store path makes by default (bytes); bigger
#: batches go run by run, so a forward's working memory stays small. (On a GPU the
#: model passes a larger cap: genlm_hf._device.default_budgets.)
BATCHED_COPY_BYTES = CPU_COPY_BYTES

_MIN_SLOTS = 256  # first pool size (slots), then doubled as needed up to the budget


@dataclasses.dataclass(frozen=True)
class KVCacheStats(PrefixCacheStats):
    """A snapshot of a [`PrefixKVCache`][] (fields of the core's ``PrefixCacheStats``).

    Attributes:
        pool_bytes: Bytes of the slot pool allocated so far (<= the budget); ``bytes``
            counts the slots in use.
    """

    pool_bytes: int


def _take(runs: Sequence[SlotRun], m: int) -> tuple[tuple[SlotRun, ...], tuple[SlotRun, ...]]:
    """Split runs covering n positions into the first ``m`` positions and the rest.

    Node payloads are tuples of int pairs: Python's garbage collector stops tracking
    those, so a large cache adds nothing to its full collections.
    """
    head: list[SlotRun] = []
    tail: list[SlotRun] = []
    left = m
    for start, length in runs:
        if left >= length:
            head.append((start, length))
        elif left > 0:
            head.append((start, left))
            tail.append((start + left, length - left))
        else:
            tail.append((start, length))
        left -= length
    return tuple(head), tuple(tail)


def _join(runs: tuple[SlotRun, ...], more: tuple[SlotRun, ...]) -> tuple[SlotRun, ...]:
    """Runs of a segment followed by those of its extension (adjacent runs fused)."""
    if runs and more:
        start, length = runs[-1]
        if start + length == more[0][0]:
            return (*runs[:-1], (start, length + more[0][1]), *more[1:])
    return runs + more


class PrefixKVCache:
    """Per-adapter radix trees of K/V segments in one slot pool under a byte budget.

    The pool's shape, dtype and device are taken from the first tensor inserted.

    Args:
        max_bytes: Most bytes of key/value vectors held (0 disables the cache).
        grow: Grow the pool by doubling as slots are needed (True), or allocate it
            whole at the first insert (False). Default: whole on the CPU, where
            untouched pages cost no resident memory and growing by copies would leave
            freed blocks behind in the heap; growing on accelerators.

    Raises:
        ValueError: ``max_bytes`` is not an integer >= 0.
    """

    def __init__(self, max_bytes: int, grow: bool | None = None) -> None:
        if not is_int_at_least(max_bytes, 0):
            raise ValueError(f"max_bytes must be an integer >= 0, got {max_bytes!r}")
        self._max_bytes = max_bytes
        self._grow = grow
        self._pool: torch.Tensor | None = None
        self._slot_bytes = 0
        self._capacity = 0  # slots the budget allows
        self._fresh = 0  # slots [fresh, pool size) were never used
        self._free: list[SlotRun] = []  # freed runs, reused last-in first-out
        self._used = 0  # slots held by nodes (and the dummy slot, once made)
        self._dummy: int | None = None  # see dummy_slot
        self._tree: PrefixTree[tuple[SlotRun, ...]] = PrefixTree(
            split=_take, release=self._free_runs, merge=_join
        )  # a node's payload: the runs of slots holding its positions

    @property
    def max_bytes(self) -> int:
        """The budget, in bytes."""
        return self._max_bytes

    @property
    def pool(self) -> torch.Tensor | None:
        """The slot pool, ``(2 * layers, heads, slots, head_dim)`` (None before any insert)."""
        return self._pool

    # -- reading -------------------------------------------------------------------

    def match(
        self, adapter: Hashable, token_ids: Sequence[int], limit: int, *, record: bool = True
    ) -> list[SlotRun]:
        """Find the longest cached prefix of ``token_ids[:limit]``.

        The slots returned hold what they should until the next [`insert`][] (which
        may reuse evicted slots, or move the pool): read them from [`pool`][] before
        storing anything.

        Args:
            adapter: Which tree (LoRA adapter name, None for the base model).
            token_ids: The request's tokens.
            limit: Most positions to reuse (callers pass ``len(token_ids) - 1``: the last
                position must be computed to get its logits).
            record: Count this lookup in the hit/miss statistics (a caller that looks
                several times counts once, with [`count`][]).

        Returns:
            Slot runs of positions ``0, 1, ...`` in order; the past length is the sum
            of their lengths.
        """
        found, pos = self._tree.match(adapter, token_ids, limit)
        runs: list[SlotRun] = []
        for node_runs, used, held in found:
            runs.extend(node_runs if used == held else _take(node_runs, used)[0])
        if record:
            self.count(pos)
        return runs

    def count(self, reused: int) -> None:
        """Count one lookup that reused ``reused`` positions (0: a miss)."""
        self._tree.count(reused)

    # -- writing -------------------------------------------------------------------

    def insert(
        self, adapter: Hashable, token_ids: Sequence[int], start: int, kv: torch.Tensor
    ) -> None:
        """[`insert_many`][] for one request; ``kv`` is ``(2 * layers, heads, n, head_dim)``."""
        self.insert_many(adapter, [(token_ids, start)], kv.unsqueeze(1))

    def insert_many(
        self,
        adapter: Hashable,
        requests: Sequence[tuple[Sequence[int], int]],
        kv: torch.Tensor,
        max_copy_bytes: int = BATCHED_COPY_BYTES,
    ) -> None:
        """[`insert`][] for the rows of one forward, with one copy into the pool.

        Args:
            adapter: Which tree.
            requests: ``(token_ids, start)`` per row, as for [`insert`][].
            kv: The forward's new positions, ``(2 * layers, rows, heads, width, head_dim)``:
                row ``j``'s positions ``start..`` are ``kv[:, j, :, 0 : len - start]``.
            max_copy_bytes: A ``kv`` bigger than this is stored run by run instead of
                through one temporary copy of the whole block.
        """
        if self._max_bytes == 0 or not requests:
            return
        if self._pool is None:
            self._allocate_pool(kv[:, 0])
        width = kv.shape[3]
        copies = [  # (first slot, count, row, offset), in insertion order
            (slot, n, j, offset)
            for j, (token_ids, start) in enumerate(requests)
            for slot, n, offset in self._place(adapter, token_ids, start)
        ]
        if not copies:
            return
        pool = self._pool
        assert pool is not None
        if kv.numel() * kv.element_size() > max_copy_bytes:
            # Large: run by run, with no temporary copy of the block. In order, so a
            # slot given out twice (its first node evicted by a later row) ends up
            # holding the later row, as with one-by-one inserts.
            for slot, n, j, offset in copies:
                pool[:, :, slot : slot + n].copy_(kv[:, j, :, offset : offset + n])
            return
        source: dict[int, int] = {}  # slot -> flat source position; later rows win
        for slot, n, j, offset in copies:
            for i in range(n):
                source[slot + i] = j * width + offset + i
        layers2, rows, heads, _, dim = kv.shape
        flat = kv.transpose(1, 2).reshape(layers2, heads, rows * width, dim)
        device = pool.device
        dest = index_on(list(source), device)
        src = index_on(list(source.values()), device)
        pool.index_copy_(2, dest, flat.index_select(2, src))

    def _place(
        self, adapter: Hashable, token_ids: Sequence[int], start: int
    ) -> list[tuple[int, int, int]]:
        """Add the tree nodes for a request; return the copies to make into the pool.

        Returns:
            ``(first slot, count, offset)`` per run: positions ``start + offset ..`` of
            the request go to those slots. Empty when nothing is to be stored.
        """
        end = len(token_ids)
        node, path, pos = self._tree.locate(adapter, token_ids)
        if not start <= pos < end:
            return []
        runs = self._alloc(end - pos, protect=path)
        if runs is None:
            return []
        self._tree.attach(node, tuple(token_ids[pos:]), tuple(runs), path)
        copies: list[tuple[int, int, int]] = []
        offset = pos - start
        for slot, n in runs:
            copies.append((slot, n, offset))
            offset += n
        return copies

    # -- writing in place (a forward writes the pool itself: genlm_hf._in_place) ---------

    def reserve(
        self,
        adapter: Hashable,
        requests: Sequence[tuple[Sequence[int], int]],
        like: torch.Tensor,
    ) -> list[list[SlotRun]] | None:
        """Slots for each request's new positions ``token_ids[start:]``, before the forward.

        The nodes holding every request's past are protected from eviction meanwhile:
        the forward reads them. ``like``: a tensor shaped, typed and placed as one
        position's keys and values, ``(2 * layers, heads, 1, head_dim)``, to make the
        pool from if there is none yet. Hand the slots to [`keep`][] after the forward,
        or to [`release`][] if it failed.

        Returns:
            Per request, runs of slots (``len(token_ids) - start`` slots); None when the
            cache is off or the budget cannot hold them (then nothing is taken).
        """
        if self._max_bytes == 0:
            return None
        if self._pool is None:
            self._allocate_pool(like)
        if self._dummy is None:
            self._dummy = self._take_dummy()
            if self._dummy is None:
                return None
        protect: set[object] = set()
        for token_ids, start in requests:
            protect.update(self._tree.locate(adapter, token_ids[:start])[1])
        reserved: list[list[SlotRun]] = []
        for token_ids, start in requests:
            runs = self._alloc(len(token_ids) - start, protect=protect)  # type: ignore[arg-type]
            if runs is None:
                self.release(reserved)
                return None
            reserved.append(runs)
        return reserved

    @property
    def dummy_slot(self) -> int | None:
        """A zeroed slot no prefix holds: padding writes there (None before [`reserve`][])."""
        return self._dummy

    def keep(
        self,
        adapter: Hashable,
        requests: Sequence[tuple[Sequence[int], int]],
        reserved: Sequence[Sequence[SlotRun]],
    ) -> None:
        """Store each request's new positions, written by the forward into its reserved slots.

        No copy: the slots become the new nodes'. Positions another request of the same
        forward stored first are freed (their slots hold the same keys and values).
        """
        for (token_ids, start), runs in zip(requests, reserved, strict=True):
            node, path, pos = self._tree.locate(adapter, token_ids)
            if pos < start:  # pragma: no cover - the past was protected while reserved
                self._free_runs(runs)
                continue
            stored, new = _take(runs, pos - start)
            self._free_runs(stored)
            if new:
                self._tree.attach(node, tuple(token_ids[pos:]), new, path)

    def release(self, reserved: Sequence[Sequence[SlotRun]]) -> None:
        """Give back slots [`reserve`][] took, unused (the forward failed)."""
        for runs in reserved:
            self._free_runs(runs)

    def _take_dummy(self) -> int | None:
        runs = self._alloc(1, protect=())
        if runs is None:
            return None
        pool = self._pool
        assert pool is not None
        pool[:, :, runs[0][0]].zero_()  # finite: a masked key's weight 0 times it is 0
        return runs[0][0]

    # -- slots ---------------------------------------------------------------------

    def _allocate_pool(self, kv: torch.Tensor) -> None:
        layers2, heads, _, dim = kv.shape
        self._slot_bytes = layers2 * heads * dim * kv.element_size()
        self._capacity = self._max_bytes // self._slot_bytes
        grow = self._grow if self._grow is not None else kv.device.type != "cpu"
        size = min(self._capacity, _MIN_SLOTS) if grow else self._capacity
        self._pool = torch.empty((layers2, heads, size, dim), dtype=kv.dtype, device=kv.device)

    def _alloc(self, n: int, protect: Sequence[object]) -> list[SlotRun] | None:
        """Take ``n`` slots (as runs), evicting LRU leaves not on ``protect`` if needed."""
        if n > self._capacity:
            return None
        keep = set(protect)
        while self._capacity - self._used < n:
            if not self._tree.evict_one(keep):
                return None  # only this prefix's own ancestors are left
        runs: list[SlotRun] = []
        need = n
        free = self._free
        while need and free:
            s, length = free.pop()
            if length > need:
                free.append((s + need, length - need))
                length = need
            runs.append((s, length))
            need -= length
        if need:
            self._ensure_pool(self._fresh + need)
            runs.append((self._fresh, need))
            self._fresh += need
        self._used += n
        return runs

    def _ensure_pool(self, slots: int) -> None:
        """Grow the pool (doubling, at most to the budget) to hold ``slots`` slots."""
        pool = self._pool
        assert pool is not None
        size = pool.shape[2]
        if slots <= size:
            return
        while size < slots:
            size *= 2
        size = min(size, self._capacity)
        grown = torch.empty(
            (pool.shape[0], pool.shape[1], size, pool.shape[3]),
            dtype=pool.dtype,
            device=pool.device,
        )
        grown[:, :, : self._fresh].copy_(pool[:, :, : self._fresh])
        self._pool = grown

    # -- dropping ------------------------------------------------------------------

    def _free_runs(self, runs: Sequence[SlotRun]) -> None:
        """A dropped node's slots go back to the free list."""
        for run in reversed(runs):
            self._free.append(run)
            self._used -= run[1]

    def drop_adapter(self, adapter: Hashable) -> None:
        """Forget every prefix cached for ``adapter``."""
        self._tree.drop_adapter(adapter)

    def clear(self) -> None:
        """Forget everything and free the pool (statistics are kept)."""
        self._tree.clear()
        self._pool = None
        self._free = []
        self._fresh = 0
        self._used = 0
        self._dummy = None

    # -- introspection -------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        """Bytes of key/value vectors held."""
        return self._used * self._slot_bytes

    def __len__(self) -> int:
        return len(self._tree)

    @property
    def stats(self) -> KVCacheStats:
        """A snapshot of sizes and counters."""
        pool = self._pool
        return self._tree.stats(
            self.nbytes,
            self._max_bytes,
            KVCacheStats,
            pool_bytes=0 if pool is None else pool.numel() * pool.element_size(),
        )

    def __repr__(self) -> str:
        s = self.stats
        return (
            f"<PrefixKVCache {s.bytes / 2**20:.1f}/{s.max_bytes / 2**20:.1f} MiB, "
            f"{s.entries} segments, {s.tokens} tokens, hits={s.hits} misses={s.misses}>"
        )

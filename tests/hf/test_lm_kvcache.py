"""PrefixKVCache: the radix tree of K/V segments, its LRU eviction and its accounting.

Tensors here are fake K/V whose every entry encodes (adapter, position, token), so a
reassembled prefix can be checked position by position.
"""

from __future__ import annotations

import random

import pytest
import torch
from session_requires import require

require("genlm_hf.kvcache", reason="genlm-hf is not installed")

from genlm_hf.kvcache import PrefixKVCache  # noqa: E402

LAYERS2, HEADS, DIM = 4, 2, 3  # (2 * layers, heads, positions, head_dim)


def fake_kv(token_ids, start: int, adapter: int = 0) -> torch.Tensor:
    """K/V of positions start.. whose value identifies (adapter, position, token)."""
    vals = torch.tensor(
        [adapter * 1e6 + pos * 1e3 + token_ids[pos] for pos in range(start, len(token_ids))],
        dtype=torch.float64,
    )
    return vals[None, None, :, None].expand(LAYERS2, HEADS, -1, DIM).clone()


def assemble(cache, runs) -> torch.Tensor:
    """The K/V a lookup's slot runs point at, concatenated."""
    if not runs:
        return torch.empty((LAYERS2, HEADS, 0, DIM), dtype=torch.float64)
    return torch.cat([cache.pool[:, :, s : s + n] for s, n in runs], dim=2)


def per_position_bytes() -> int:
    return LAYERS2 * HEADS * DIM * 8


def test_match_returns_longest_prefix_below_limit():
    cache = PrefixKVCache(1 << 20)
    a = [1, 2, 3, 4, 5]
    cache.insert(None, a, 0, fake_kv(a, 0))
    segs = cache.match(None, a, limit=4)
    assert sum(u for _, u in segs) == 4
    torch.testing.assert_close(assemble(cache, segs), fake_kv(a, 0)[:, :, :4])
    assert sum(u for _, u in cache.match(None, [1, 2, 9], limit=2)) == 2
    assert cache.match(None, [7, 8], limit=1) == []
    stats = cache.stats
    assert (stats.hits, stats.misses) == (2, 1)
    assert stats.hit_tokens == 4 + 2


def test_insert_stores_only_the_missing_suffix_and_splits():
    cache = PrefixKVCache(1 << 20)
    a = [1, 2, 3, 4, 5]
    cache.insert(None, a, 0, fake_kv(a, 0))
    b = [1, 2, 3, 9, 9, 9]  # branches inside a's segment: split at 3
    past = cache.match(None, b, len(b) - 1)
    assert sum(u for _, u in past) == 3
    cache.insert(None, b, 3, fake_kv(b, 3))
    assert cache.stats.entries == 3  # [1,2,3] -> {[4,5], [9,9,9]}
    assert cache.stats.tokens == 8
    assert cache.nbytes == 8 * per_position_bytes()
    for seq in (a, b):
        segs = cache.match(None, seq, len(seq))
        torch.testing.assert_close(assemble(cache, segs), fake_kv(seq, 0))
    # inserting something already present stores nothing
    cache.insert(None, a[:4], 0, fake_kv(a[:4], 0))
    assert cache.stats.tokens == 8


def test_insert_without_ancestors_is_skipped():
    cache = PrefixKVCache(1 << 20)
    a = [1, 2, 3]
    cache.insert(None, a, 2, fake_kv(a[2:], 0))  # positions 0..1 are not cached
    assert cache.stats.entries == 0 and cache.nbytes == 0


def test_adapters_have_separate_trees():
    cache = PrefixKVCache(1 << 20)
    a = [1, 2, 3]
    cache.insert("x", a, 0, fake_kv(a, 0, adapter=1))
    assert cache.match(None, a, 3) == []
    torch.testing.assert_close(assemble(cache, cache.match("x", a, 3)), fake_kv(a, 0, adapter=1))
    cache.insert(None, a, 0, fake_kv(a, 0))
    cache.drop_adapter("x")
    assert cache.match("x", a, 3) == []
    assert cache.stats.tokens == 3 and cache.nbytes == 3 * per_position_bytes()


def test_lru_evicts_least_recent_leaves_first():
    unit = per_position_bytes()
    cache = PrefixKVCache(6 * unit)
    root = [1, 2]
    cache.insert(None, root, 0, fake_kv(root, 0))
    for tok in (10, 11, 12, 13):  # four one-token children of [1, 2]
        seq = root + [tok]
        cache.insert(None, seq, 2, fake_kv(seq, 2))
    assert cache.nbytes == 6 * unit and cache.stats.evictions == 0
    cache.match(None, root + [10, 0], 3)  # touch child 10
    seq = root + [14]
    cache.insert(None, seq, 2, fake_kv(seq, 2))  # full: makes room first
    assert cache.stats.evictions == 1
    # child 11 was least recently used: gone; 10 (touched) and the shared root stay
    assert sum(u for _, u in cache.match(None, root + [11, 0], 3)) == 2
    assert sum(u for _, u in cache.match(None, root + [10, 0], 3)) == 3
    torch.testing.assert_close(assemble(cache, cache.match(None, seq, 3)), fake_kv(seq, 0))
    assert cache.nbytes == 6 * unit


def test_never_evicts_the_prefix_being_extended():
    unit = per_position_bytes()
    cache = PrefixKVCache(4 * unit)
    a = [1, 2, 3]
    cache.insert(None, a, 0, fake_kv(a, 0))
    b = a + [4, 5]  # needs 2 more slots, only 1 free: the only victim is b's own prefix
    cache.insert(None, b, 3, fake_kv(b, 3))
    assert cache.stats.tokens == 3 and cache.stats.evictions == 0
    torch.testing.assert_close(assemble(cache, cache.match(None, a, 3)), fake_kv(a, 0))
    cache.insert(None, [9] * 5, 0, fake_kv([9] * 5, 0))  # larger than the whole budget
    assert cache.stats.tokens == 3


def test_pool_whole_on_cpu():
    unit = per_position_bytes()
    cache = PrefixKVCache(1000 * unit)
    cache.insert(None, [1], 0, fake_kv([1], 0))
    assert cache.stats.pool_bytes == 1000 * unit  # untouched pages: not resident


def test_pool_grows_and_reuses_freed_slots():
    unit = per_position_bytes()
    cache = PrefixKVCache(1000 * unit, grow=True)
    for i in range(200):  # 400 slots: more than the first pool size (256)
        seq = [i, i]
        cache.insert(None, seq, 0, fake_kv(seq, 0))
    assert cache.stats.pool_bytes == 512 * unit
    for i in range(200):
        torch.testing.assert_close(
            assemble(cache, cache.match(None, [i, i], 2)), fake_kv([i, i], 0)
        )
    cache.drop_adapter(None)
    assert cache.nbytes == 0
    for i in range(150):  # 450 slots: the 400 freed ones are reused first
        seq = [i, i, i]
        cache.insert("x", seq, 0, fake_kv(seq, 0, adapter=2))
    assert cache.stats.pool_bytes == 512 * unit
    for i in range(150, 300):  # 900 slots in all: grown to the budget, not beyond
        seq = [i, i, i]
        cache.insert("x", seq, 0, fake_kv(seq, 0, adapter=2))
    assert cache.stats.pool_bytes == 1000 * unit
    assert cache.stats.evictions == 0
    torch.testing.assert_close(
        assemble(cache, cache.match("x", [7, 7, 7], 3)), fake_kv([7] * 3, 0, 2)
    )


def test_random_workload_invariants():
    """Random inserts/lookups under a tight budget: bytes accounted exactly, contents right."""
    rng = random.Random(0)
    unit = per_position_bytes()
    cache = PrefixKVCache(40 * unit)
    seqs: list[list[int]] = [[0]]
    for _ in range(400):
        parent = rng.choice(seqs)
        seq = parent[: rng.randrange(0, len(parent) + 1)] + [
            rng.randrange(4) for _ in range(rng.randrange(1, 6))
        ]
        seqs.append(seq)
        segs = cache.match(None, seq, len(seq) - 1)
        past = sum(u for _, u in segs)
        torch.testing.assert_close(assemble(cache, segs), fake_kv(seq, 0)[:, :, :past])
        cache.insert(None, seq, past, fake_kv(seq, past))
        stats = cache.stats
        assert stats.bytes <= 40 * unit
        assert stats.bytes == stats.tokens * unit
        assert stats.entries == len(cache)
    assert cache.stats.evictions > 0
    cache.clear()
    assert (cache.nbytes, len(cache)) == (0, 0)


def batch_block(requests) -> torch.Tensor:
    """The K/V block of one forward, ``(2 * layers, rows, heads, width, dim)``, padded with nan."""
    width = max(len(seq) - start for seq, start in requests)
    block = torch.full(
        (LAYERS2, len(requests), HEADS, width, DIM), float("nan"), dtype=torch.float64
    )
    for j, (seq, start) in enumerate(requests):
        block[:, j, :, : len(seq) - start] = fake_kv(seq, start)
    return block


@pytest.mark.parametrize("max_copy_bytes", [8 << 20, 0], ids=["one-copy", "run-by-run"])
def test_insert_many_equals_inserting_one_by_one(max_copy_bytes):
    """Random batches under a tight budget (slots reused inside a batch): same tree, same K/V."""
    rng = random.Random(1)
    unit = per_position_bytes()
    batched, single = PrefixKVCache(30 * unit), PrefixKVCache(30 * unit)
    seqs: list[list[int]] = [[0]]
    for _ in range(60):
        requests = []
        for _ in range(rng.randrange(1, 7)):
            parent = rng.choice(seqs)
            seq = parent[: rng.randrange(0, len(parent) + 1)] + [
                rng.randrange(4) for _ in range(rng.randrange(1, 5))
            ]
            seqs.append(seq)
            past = sum(u for _, u in batched.match(None, seq, len(seq) - 1, record=False))
            assert past == sum(u for _, u in single.match(None, seq, len(seq) - 1, record=False))
            requests.append((seq, past))
        batched.insert_many(None, requests, batch_block(requests), max_copy_bytes)
        for seq, past in requests:
            single.insert(None, seq, past, fake_kv(seq, past))
        assert batched.stats == single.stats
        for seq, _ in requests:
            segs = batched.match(None, seq, len(seq), record=False)
            single.match(None, seq, len(seq), record=False)  # same LRU touches in both
            n = sum(u for _, u in segs)
            torch.testing.assert_close(assemble(batched, segs), fake_kv(seq, 0)[:, :, :n])
    assert batched.stats.evictions > 0


def test_zero_budget_stores_nothing():
    cache = PrefixKVCache(0)
    cache.insert(None, [1, 2], 0, fake_kv([1, 2], 0))
    assert cache.nbytes == 0 and len(cache) == 0


@pytest.mark.parametrize("bad", [-1, 1.5, "10", True])
def test_budget_validated(bad):
    with pytest.raises(ValueError, match="max_bytes"):
        PrefixKVCache(bad)


def test_a_growing_prefix_stays_one_node_with_fused_runs():
    cache = PrefixKVCache(1 << 20)
    seq = [1, 2, 3]
    cache.insert(None, seq, 0, fake_kv(seq, 0))
    for tok in (4, 5, 6, 7):  # a sampler's particle: one token per step
        seq = seq + [tok]
        cache.insert(None, seq, len(seq) - 1, fake_kv(seq, len(seq) - 1))
    assert cache.stats.entries == 1 and cache.stats.tokens == 7
    runs = cache.match(None, seq, len(seq))
    assert len(runs) == 1  # consecutive slots: one run
    torch.testing.assert_close(assemble(cache, runs), fake_kv(seq, 0))

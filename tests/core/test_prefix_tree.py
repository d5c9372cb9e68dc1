"""PrefixTree: the backends' shared radix tree, with payloads that are token tuples.

A payload here is the tokens its node holds, so every split and lookup can be
checked against the prompt itself.
"""

from __future__ import annotations

import random

from genlm_backend_kit import PrefixCacheStats, PrefixTree


def make_tree(released: list[tuple[int, ...]] | None = None) -> PrefixTree[tuple[int, ...]]:
    return PrefixTree(
        split=lambda p, m: (p[:m], p[m:]),
        release=None if released is None else released.append,
    )


def store(tree: PrefixTree[tuple[int, ...]], adapter, ids) -> int:
    """Insert ``ids``; return the positions that were already held."""
    node, path, held = tree.locate(adapter, ids)
    if held < len(ids):
        tree.attach(node, tuple(ids[held:]), tuple(ids[held:]), path)
    return held


def matched(tree, adapter, ids, limit) -> tuple[int, ...]:
    found, pos = tree.match(adapter, ids, limit)
    out = tuple(t for payload, used, _ in found for t in payload[:used])
    assert len(out) == pos
    return out


def test_segments_split_where_prompts_diverge():
    tree = make_tree()
    assert store(tree, None, [1, 2, 3, 4]) == 0
    assert store(tree, None, [1, 2, 9]) == 2  # splits [1,2,3,4] into [1,2] + [3,4]
    assert len(tree) == 3 and tree.tokens == 5
    assert matched(tree, None, [1, 2, 3, 4, 5], 5) == (1, 2, 3, 4)
    assert matched(tree, None, [1, 2, 3, 7], 3) == (1, 2, 3)  # partly into a segment
    assert matched(tree, None, [1, 2, 9], 2) == (1, 2)
    assert matched(tree, "lora", [1, 2], 2) == ()  # other adapter, other tree
    assert store(tree, None, [1, 2]) == 2  # ends inside what is held: nothing new
    tree.count(2)
    tree.count(0)
    assert tree.stats(10, 20) == PrefixCacheStats(
        bytes=10, max_bytes=20, entries=3, tokens=5, hits=1, misses=1, hit_tokens=2, evictions=0
    )


def test_evicts_least_recently_used_leaves_and_releases_them():
    released: list[tuple[int, ...]] = []
    tree = make_tree(released)
    store(tree, None, [1, 2])
    store(tree, None, [1, 3])  # splits: [1] + leaves [2] and [3]
    matched(tree, None, [1, 2], 2)  # [1, 2] now newer than [1, 3]
    assert tree.evict_one(protect=set())
    assert released == [(3,)]
    assert tree.evict_one(protect=set())
    assert released == [(3,), (2,)]
    node, path, _ = tree.locate(None, [1, 5])
    assert not tree.evict_one(protect=set(path))  # only the protected prefix is left
    assert tree.evictions == 2 and tree.tokens == 1


def test_drop_adapter_releases_and_clear_does_not():
    released: list[tuple[int, ...]] = []
    tree = make_tree(released)
    store(tree, "a", [1, 2, 3])
    store(tree, "b", [4])
    tree.drop_adapter("a")
    assert released == [(1, 2, 3)] and tree.tokens == 1 and len(tree) == 1
    tree.clear()
    assert released == [(1, 2, 3)] and tree.tokens == 0 and len(tree) == 0


def test_random_prompts_always_match_their_stored_prefix():
    rng = random.Random(0)
    tree = make_tree()
    stored: list[list[int]] = []
    for _ in range(300):
        base = rng.choice(stored) if stored and rng.random() < 0.7 else []
        ids = base[: rng.randrange(len(base) + 1)] + [rng.randrange(3) for _ in range(3)]
        store(tree, None, ids)
        stored.append(ids)
        probe = rng.choice(stored)
        assert matched(tree, None, probe, len(probe)) == tuple(probe)
    assert tree.tokens == sum(len(n.tokens) for n in tree._lru)


def test_merge_grows_a_leaf_instead_of_adding_nodes():
    joined = []

    def merge(a, b):
        joined.append((a, b))
        return a + b

    tree = PrefixTree(split=lambda p, m: (p[:m], p[m:]), merge=merge)
    ids = [1, 2, 3]
    node, path, held = tree.locate(None, ids)
    tree.attach(node, tuple(ids), "abc", path)
    for step, tok in enumerate([4, 5, 6]):  # a particle: one token per step
        ids.append(tok)
        node, path, held = tree.locate(None, ids)
        assert held == len(ids) - 1
        tree.attach(node, (tok,), "xyz"[step], path)
    assert len(tree) == 1 and tree.tokens == 6 and len(joined) == 3
    segments, pos = tree.match(None, ids, len(ids))
    assert pos == 6 and segments == [("abcxyz", 6, 6)]
    # a branch inside the grown leaf splits it; the branch is not merged into anything
    other = [1, 2, 3, 4, 9]
    node, path, held = tree.locate(None, other)
    assert held == 4
    tree.attach(node, (9,), "q", path)
    assert len(tree) == 3 and tree.tokens == 7
    assert tree.match(None, ids, 6)[0] == [("abcx", 4, 4), ("yz", 2, 2)]
    assert tree.match(None, other, 5)[0] == [("abcx", 4, 4), ("q", 1, 1)]


def test_lookups_stop_where_a_long_segment_diverges():
    tree = PrefixTree(split=lambda p, m: (p[:m], p[m:]))
    ids = list(range(1, 41))
    node, path, _ = tree.locate(None, ids)
    tree.attach(node, tuple(ids), "p" * 40, path)
    for cut in (1, 17, 39):
        probe = ids[:cut] + [999] + ids[cut + 1 :]
        segments, pos = tree.match(None, probe, len(probe))
        assert pos == cut and segments == [("p" * 40, cut, 40)]
    assert tree.match(None, ids, 25) == ([("p" * 40, 25, 40)], 25)

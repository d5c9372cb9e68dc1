"""The live-context table's bookkeeping (no engine): claims, LRU release, budgets."""

from __future__ import annotations

import pytest

from genlm_vllm._live import LiveContext, LiveTable


def ctx(rid: str, ids: tuple[int, ...], lora=None) -> LiveContext:
    return LiveContext(rid, (ids, lora))


def test_claim_takes_the_parent_under_the_same_adapter_only():
    table = LiveTable(slots=4, blocks=100, block_size=4)
    table.add(ctx("a", (1, 2, 3)))
    table.add(ctx("b", (1, 2, 3), lora=7))
    assert table.extends_live(((1, 2, 3, 9), None))
    assert table.claim(((1, 2, 3, 9), 8)) is None  # another adapter's context
    assert table.claim(((1, 2, 3, 4, 5), None)) is None  # two tokens past it
    assert table.claim(((1, 2, 3, 9), None)).request_id == "a"
    assert table.claim(((1, 2, 3, 9), None)) is None  # claimed once
    assert table.claim(((1,), None)) is None
    assert len(table) == 1


def test_make_room_releases_least_recent_for_slots_and_blocks():
    table = LiveTable(slots=3, blocks=6, block_size=4)
    for rid, n in (("a", 3), ("b", 7), ("c", 3)):  # 1, 2, 1 blocks (sampled slot counted)
        table.add(ctx(rid, (ord(rid), *range(n - 1))))
    assert table.held_blocks() == 4
    assert [c.request_id for c in table.make_room(slots=1, blocks=2)] == ["a"]
    assert [c.request_id for c in table.make_room(slots=1, blocks=5)] == ["b"]
    assert [c.request_id for c in table.make_room(slots=1, blocks=6)] == ["c"]
    assert len(table) == 0 and table.make_room(slots=9, blocks=99) == []


def test_add_returns_a_displaced_duplicate_and_remove_where_filters_adapters():
    table = LiveTable(slots=4, blocks=100, block_size=4)
    table.add(ctx("a", (1, 2)))
    assert table.add(ctx("a2", (1, 2))).request_id == "a"
    table.add(ctx("b", (3,), lora=5))
    assert [c.request_id for c in table.remove_where([5])] == ["b"]
    assert [c.request_id for c in table.remove_where()] == ["a2"]


def test_bad_budgets_are_refused():
    with pytest.raises(ValueError, match="slots, blocks and block_size"):
        LiveTable(slots=0, blocks=1, block_size=1)


def test_step_groups_part_base_and_lora_rows_only_where_they_cannot_mix():
    from genlm_vllm._compat import step_groups

    loras = [None, "a", None, "b"]
    assert step_groups(loras, mixes=True) == [[0, 1, 2, 3]]
    assert step_groups(loras, mixes=False) == [[0, 2], [1, 3]]
    assert step_groups([None, None], mixes=False) == [[0, 1]]
    assert step_groups(["a"], mixes=False) == [[0]]
    assert step_groups([], mixes=False) == []

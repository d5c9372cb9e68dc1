"""plan_groups and shared_prefixes: framework-free planning of prefix-cached forwards."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from genlm_backend_kit import plan_groups, shared_prefixes


@dataclasses.dataclass
class Row:
    token_ids: tuple[int, ...]
    past_len: int

    @property
    def n_new(self) -> int:
        return len(self.token_ids) - self.past_len


def test_one_token_steps_share_one_forward():
    rows = [Row((1, 2, i), 2) for i in range(64)]
    (group,) = plan_groups(rows, bytes_per_token=8, max_group_bytes=1 << 20)
    assert len(group) == 64


def test_padding_stays_within_twice_the_real_slots():
    rows = [Row(tuple(range(200)), 0)] + [Row((1, 2, 3), 2) for _ in range(3)]
    groups = plan_groups(rows, bytes_per_token=8, max_group_bytes=1 << 30)
    # 200 + 1 real query slots pad to 2 x 200 (<= 2 x 201 + 64); a third row would not fit
    assert [len(g) for g in groups] == [2, 2]
    assert groups[0][0].n_new == 200  # longest first


def test_memory_cap_splits_groups_but_never_drops_a_row():
    rows = [Row(tuple(range(10)), 0) for _ in range(5)]
    groups = plan_groups(rows, bytes_per_token=100, max_group_bytes=2500)  # 2 rows fit
    assert [len(g) for g in groups] == [2, 2, 1]
    huge = plan_groups(rows[:1], bytes_per_token=100, max_group_bytes=1)
    assert huge == [rows[:1]]  # too big alone: still computed


@given(
    st.lists(
        st.tuples(st.lists(st.integers(0, 3), min_size=1, max_size=12), st.integers(0, 12)),
        max_size=30,
    ),
    st.integers(1, 64),
    st.integers(1, 4096),
)
def test_every_row_planned_exactly_once(specs, per_token, cap):
    rows = [Row(tuple(ids), min(p, len(ids) - 1)) for ids, p in specs]
    groups = plan_groups(rows, per_token, cap)
    planned = [id(r) for g in groups for r in g]
    assert sorted(planned) == sorted(id(r) for r in rows)
    assert all(groups)


def test_shared_prefix_beyond_cached_pasts_is_found_once():
    system = tuple(range(100, 130))  # 30 uncached tokens several questions share
    rows = [Row(system + (i, i + 1), 0) for i in range(4)]
    assert shared_prefixes(rows, min_shared=16) == [system]


def test_cached_or_short_shared_stretches_are_not_worth_it():
    system = tuple(range(100, 130))
    cached = [Row(system + (i,), 25) for i in range(3)]  # only 5 new shared tokens
    assert shared_prefixes(cached, min_shared=16) == []
    short = [Row((1, 2, 3, i), 0) for i in range(3)]
    assert shared_prefixes(short, min_shared=16) == []


def test_a_prompt_extending_another_shares_the_whole_shorter_prompt():
    base = tuple(range(20))
    rows = [Row(base, 0), Row(base + (7,), 0)]
    assert shared_prefixes(rows, min_shared=16) == [base]

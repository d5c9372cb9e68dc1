"""OutputCache: LRU by entries and bytes, stats, the genlm-backend alias, thread safety."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from genlm_core.cache import OutputCache
from genlm_core.runtime import nbytes_of
from genlm_core.runtime._cache import key_nbytes


def arr(n_floats: int, fill: float = 0.0) -> np.ndarray:
    return np.full(n_floats, fill, dtype=np.float32)  # 4 bytes each


def entry(key: Any, n_floats: int) -> int:
    """Bytes an entry of ``arr(n_floats)`` under ``key`` counts: its value and its key."""
    return 4 * n_floats + key_nbytes(key)


K = key_nbytes("a")  # a one-letter key


# -- entries -------------------------------------------------------------------------------


def test_evicts_least_recently_used_by_entry_count() -> None:
    cache = OutputCache(max_entries=2)
    cache["a"] = 1
    cache["b"] = 2
    assert cache["a"] == 1  # "a" is now the most recent
    cache["c"] = 3
    assert "b" not in cache
    assert cache.keys() == ["a", "c"]
    assert len(cache) == 2


def test_contains_does_not_refresh_recency() -> None:
    cache = OutputCache(2)
    cache["a"] = 1
    cache["b"] = 2
    assert "a" in cache
    cache["c"] = 3
    assert "a" not in cache and "b" in cache


def test_setting_an_existing_key_replaces_and_refreshes_it() -> None:
    cache = OutputCache(2)
    cache["a"] = 1
    cache["b"] = 2
    cache["a"] = 10
    cache["c"] = 3
    assert cache.keys() == ["a", "c"]
    assert cache["a"] == 10


def test_get_default_getitem_keyerror_and_stats() -> None:
    cache = OutputCache(4)
    key = ((1, 2, 3), None)
    assert cache.get(key) is None
    assert cache.get(key, "dflt") == "dflt"
    with pytest.raises(KeyError) as info:
        cache[key]
    assert info.value.args == (key,)
    cache[key] = "v"
    assert cache.get(key) == "v"
    assert cache[key] == "v"
    assert (cache.hits, cache.misses) == (2, 3)
    assert "hits=2" in repr(cache)


def test_zero_entries_stores_nothing_and_none_is_unbounded() -> None:
    off = OutputCache(0)
    off["a"] = 1
    assert len(off) == 0 and off.get("a") is None
    unbounded = OutputCache()
    for i in range(1000):
        unbounded[i] = i
    assert len(unbounded) == 1000


def test_pop_delitem_remove_if_and_clear() -> None:
    cache = OutputCache(10)
    for i in range(4):
        cache[((i,), "lora" if i % 2 else None)] = arr(1)
    assert cache.remove_if(lambda key: key[1] == "lora") == 2
    assert cache.keys() == [((0,), None), ((2,), None)]
    assert cache.nbytes == entry(((0,), None), 1) + entry(((2,), None), 1)
    assert cache.pop(((0,), None)).nbytes == 4
    assert cache.pop("missing", "d") == "d"
    del cache[((2,), None)]
    with pytest.raises(KeyError):
        del cache["missing"]
    assert len(cache) == 0 and cache.nbytes == 0
    cache["x"] = arr(3)
    cache.clear()
    assert len(cache) == 0 and cache.nbytes == 0


# -- bytes ---------------------------------------------------------------------------------


def test_byte_budget_evicts_lru_until_it_fits() -> None:
    cache = OutputCache(max_entries=100, max_bytes=40 + 3 * K)  # values, plus 3 keys
    cache["a"] = arr(4)  # 16 bytes (+ its key)
    cache["b"] = arr(4)  # 32
    cache.get("a")  # "b" becomes least recent
    cache["c"] = arr(2)  # 40: fits exactly
    assert cache.nbytes == 40 + 3 * K and len(cache) == 3
    cache["d"] = arr(5)  # 60 -> evict "b" (16): 44 -> evict "a" (16): 28
    assert cache.keys() == ["c", "d"]
    assert cache.nbytes == 28 + 2 * K


def test_value_bigger_than_the_budget_is_not_stored_and_drops_the_stale_one() -> None:
    budget = entry("small", 2) + entry("k", 1)
    cache = OutputCache(max_bytes=budget)
    cache["small"] = arr(2)
    cache["k"] = arr(1)
    cache["k"] = arr(budget // 4)  # more than the whole budget
    assert "k" not in cache
    assert cache.keys() == ["small"] and cache.nbytes == entry("small", 2)


def test_replacing_a_value_updates_the_byte_count() -> None:
    cache = OutputCache(max_bytes=1000)
    cache["k"] = arr(10)
    cache["k"] = arr(3)
    assert cache.nbytes == entry("k", 3)


def test_torch_tensors_are_counted_by_nbytes() -> None:
    cache = OutputCache(max_bytes=1024)
    cache["t"] = torch.zeros(16, dtype=torch.float32)
    cache["pair"] = (torch.zeros(8, dtype=torch.float64), [np.zeros(2, dtype=np.int64)])
    assert cache.nbytes == 64 + 64 + 16 + key_nbytes("t") + key_nbytes("pair")


def test_nbytes_of_counts_containers_and_ignores_plain_objects() -> None:
    assert nbytes_of({"a": arr(2), "b": (arr(1), "text")}) == 12
    assert nbytes_of("a string") == 0
    assert nbytes_of(torch.zeros(3, 4)[0]) == 16  # a view counts its own elements


# -- genlm-backend compatibility ---------------------------------------------------------------


def test_genlm_backend_constructor_alias() -> None:
    positional = OutputCache(3)
    keyword = OutputCache(maxsize=3)
    assert positional.max_entries == keyword.max_entries == keyword.maxsize == 3
    for i in range(5):
        keyword[i] = i
    assert len(keyword) == 3


def test_move_to_cpu_round_trips_the_tensor() -> None:
    cache = OutputCache(maxsize=2, move_to_cpu=True)
    value = torch.arange(4.0)
    cache["k"] = value
    out = cache["k"]
    assert out.device == value.device
    assert torch.equal(out, value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_entries": -1}, "max_entries must be None or an integer >= 0, got -1"),
        ({"max_entries": 2.5}, "max_entries must be None or an integer >= 0, got 2.5"),
        ({"max_bytes": -5}, "max_bytes must be None or an integer >= 0, got -5"),
        ({"max_entries": 2, "maxsize": 3}, "pass max_entries or its alias maxsize, not both"),
    ],
)
def test_limits_are_validated(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OutputCache(**kwargs)


# -- a model LRU, and threads --------------------------------------------------------------------

ops = st.lists(
    st.tuples(st.sampled_from(["set", "get", "pop"]), st.integers(0, 6), st.integers(0, 6)),
    max_size=60,
)


@given(
    ops=ops, max_entries=st.none() | st.integers(0, 4), max_bytes=st.none() | st.integers(0, 160)
)
def test_matches_a_reference_lru(
    ops: list[tuple[str, int, int]], max_entries: int | None, max_bytes: int | None
) -> None:
    cache = OutputCache(max_entries, max_bytes=max_bytes)
    model: OrderedDict[int, np.ndarray] = OrderedDict()
    for op, key, size in ops:
        if op == "set":
            model.pop(key, None)
            value = arr(size)
            if (max_bytes is None or entry(key, size) <= max_bytes) and max_entries != 0:
                model[key] = value
                while (max_entries is not None and len(model) > max_entries) or (
                    max_bytes is not None and weight(model) > max_bytes
                ):
                    model.popitem(last=False)
            cache[key] = value
        elif op == "get":
            expected = model.get(key)
            if expected is not None:
                model.move_to_end(key)
            assert cache.get(key) is expected
        else:
            assert cache.pop(key) is model.pop(key, None)
        assert cache.keys() == list(model)
        assert cache.nbytes == weight(model)


def weight(entries: dict[Any, np.ndarray]) -> int:
    return sum(v.nbytes + key_nbytes(k) for k, v in entries.items())


def test_concurrent_writers_and_readers_keep_the_invariants() -> None:
    cache = OutputCache(max_entries=50, max_bytes=50 * 40)
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def writer(offset: int) -> None:
        try:
            barrier.wait()
            for i in range(3000):
                cache[(offset, i % 80)] = arr(1 + i % 17)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader() -> None:
        try:
            barrier.wait()
            for i in range(6000):
                cache.get((i % 2, i % 80))
                if i % 500 == 0:
                    cache.remove_if(lambda key: key[1] == 7)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in (0, 1)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert len(cache) <= 50
    assert cache.nbytes <= 50 * 40
    assert cache.nbytes == sum(cache.get(k).nbytes + key_nbytes(k) for k in cache.keys())
    assert cache.hits + cache.misses == 2 * 6000 + len(cache)


def test_dropped_values_die_after_the_size_is_updated() -> None:
    """A value's finalizer (genlm_core.runtime.RowPool) may read the cache: it sees the new size."""
    import weakref

    class Value:
        nbytes = 10

    cache = OutputCache(max_bytes=2 * (10 + K) + 5)  # two entries: values and keys
    seen: list[int] = []

    def put(key: str) -> None:
        value = Value()
        weakref.finalize(value, lambda: seen.append(cache.nbytes))
        cache[key] = value

    put("a")
    put("b")
    put("c")  # evicts "a"
    assert seen == [2 * (10 + K)]
    cache.remove_if(lambda key: key == "b")
    assert seen == [2 * (10 + K), 10 + K]
    cache.clear()
    assert seen == [2 * (10 + K), 10 + K, 0]


def test_the_byte_budget_counts_the_token_ids_of_the_keys() -> None:
    """Long contexts over a tiny vocabulary: the keys, not the rows, hold the memory."""
    from genlm_core.lm import Request

    budget = 1 << 20
    cache = OutputCache(max_bytes=budget)
    for i in range(200):
        cache[Request(tuple(range(i, i + 20_000)), None, 0)] = torch.zeros(4)  # 16-byte rows
    held = len(cache) * (8 * 20_000 + 16)  # token ids (8 bytes a pointer) and rows
    assert held <= budget, f"{len(cache)} entries hold {held} bytes, over the {budget} budget"
    assert held <= cache.nbytes <= budget

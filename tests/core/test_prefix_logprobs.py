"""prefix_next_token_logprobs: the batched default and the one-forward hook."""

import asyncio

import pytest
import torch

from genlm_core.errors import BackendContractError, InvalidArgumentError, InvalidTokenIdsError
from genlm_core.lm import AsyncLMBase, BatchedAsyncLM, PrefixRequest, Request
from genlm_core.lm._requests import LONG_PROMPT
from genlm_core.testing import ByteTokenizer, MockAsyncLM


class PerPrefixMock(MockAsyncLM):
    """A mock without the hook: prefix requests are batched next-token requests."""

    compute_prefix_batch = BatchedAsyncLM.compute_prefix_batch


class OneForwardMock(MockAsyncLM):
    """A mock whose prefix requests go through compute_prefix_batch (as genlm-hf's do)."""

    def __init__(self, tokenizer, **kwargs):
        super().__init__(tokenizer, **kwargs)
        self.prefix_batches: list[list[PrefixRequest]] = []

    def compute_prefix_batch(self, requests):
        self.prefix_batches.append(list(requests))
        return [self.compute_batch(req.prefixes()) for req in requests]


class PlainLM(AsyncLMBase):
    """Not batched: the AsyncLMBase default gathers next-token calls."""

    def __init__(self, mock):
        super().__init__(mock.tokenizer, byte_vocab=(mock.byte_vocab, mock.str_vocab))
        self.mock = mock
        self.calls = 0

    async def next_token_logprobs(self, token_ids, lora_name=None):
        self.calls += 1
        return self.mock.next_token_logprobs_sync(token_ids, lora_name)

    def next_token_logprobs_sync(self, token_ids, lora_name=None):
        self.calls += 1
        return self.mock.next_token_logprobs_sync(token_ids, lora_name)


@pytest.fixture(scope="module")
def tokenizer():
    return ByteTokenizer()


def expected(lm, ids):
    return torch.stack([lm.next_token_logprobs_sync(ids[: i + 1]) for i in range(len(ids))])


def test_prefix_request_is_never_equal_to_a_request():
    assert PrefixRequest((1, 2), None) != Request((1, 2), None)
    assert PrefixRequest((1, 2), "a").prefixes() == [Request((1,), "a"), Request((1, 2), "a")]


async def test_default_batches_missing_prefixes_in_one_batch(tokenizer):
    lm = PerPrefixMock(tokenizer)
    assert not lm.computes_prefixes_in_one_forward
    await lm.next_token_logprobs([3, 4])  # one prefix cached before
    rows = await lm.prefix_next_token_logprobs([3, 4, 5, 6])
    assert lm.batches == [1, 3]  # only the three missing prefixes, in one batch
    torch.testing.assert_close(rows, expected(lm, [3, 4, 5, 6]), atol=0, rtol=0)
    again = await lm.prefix_next_token_logprobs([3, 4, 5, 6])
    assert lm.batches == [1, 3] and torch.equal(rows, again)  # all cached now
    lm.cleanup()


async def test_hook_computes_the_sequence_at_once_and_fills_the_cache(tokenizer):
    lm = OneForwardMock(tokenizer)
    ids = [7, 8, 9, 10, 11]
    rows = await lm.prefix_next_token_logprobs(ids)
    assert [[r.token_ids for r in b] for b in lm.prefix_batches] == [[tuple(ids)]]
    torch.testing.assert_close(rows, expected(MockAsyncLM(tokenizer), ids), atol=0, rtol=0)
    n_batches = len(lm.batches)
    for i in range(len(ids)):  # every prefix is now a cache hit: nothing computed
        torch.testing.assert_close(await lm.next_token_logprobs(ids[: i + 1]), rows[i])
    assert len(lm.batches) == n_batches
    assert torch.equal(lm.prefix_next_token_logprobs_sync(ids), rows)
    lm.cleanup()


async def test_hook_batches_concurrent_sequences_with_next_token_requests(tokenizer):
    lm = OneForwardMock(tokenizer)
    a, b, c = await asyncio.gather(
        lm.prefix_next_token_logprobs([1, 2, 3]),
        lm.prefix_next_token_logprobs([4, 5]),
        lm.next_token_logprobs([6]),
    )
    assert len(lm.prefix_batches) == 1 and len(lm.prefix_batches[0]) == 2
    ref = MockAsyncLM(tokenizer)
    torch.testing.assert_close(a, expected(ref, [1, 2, 3]))
    torch.testing.assert_close(b, expected(ref, [4, 5]))
    torch.testing.assert_close(c, ref.next_token_logprobs_sync([6]))
    lm.cleanup()


async def test_hook_returning_the_wrong_number_of_rows_is_a_contract_error(tokenizer):
    class Broken(OneForwardMock):
        def compute_prefix_batch(self, requests):
            return [self.compute_batch(req.prefixes()[:-1]) for req in requests]

    lm = Broken(tokenizer)
    with pytest.raises(
        BackendContractError, match="2 rows for a sequence of 3 tokens from position 0; expected 3"
    ):
        await lm.prefix_next_token_logprobs([1, 2, 3])
    assert (await lm.next_token_logprobs([1])).shape == (len(lm.byte_vocab),)  # still works
    lm.cleanup()


@pytest.mark.parametrize("cls", [PerPrefixMock, OneForwardMock, MockAsyncLM])
async def test_start_skips_the_rows_before_it(tokenizer, cls):
    lm = cls(tokenizer)
    ids = [5, 6, 7, 8, 9]
    rows = await lm.prefix_next_token_logprobs(ids, start=3)
    assert rows.shape == (2, len(lm.byte_vocab))
    torch.testing.assert_close(rows, expected(MockAsyncLM(tokenizer), ids)[3:], atol=0, rtol=0)
    assert lm.cache.get(Request((5, 6, 7), None)) is None  # rows before start not computed
    assert torch.equal(lm.prefix_next_token_logprobs_sync(ids, start=4), rows[1:])
    for bad in (-1, 5, 1.5, None):
        with pytest.raises(InvalidArgumentError, match=f"start must be an integer in 0..4.*{bad}"):
            await lm.prefix_next_token_logprobs(ids, start=bad)
    lm.cleanup()


async def test_base_class_default_gathers_next_token_calls(tokenizer):
    lm = PlainLM(MockAsyncLM(tokenizer))
    rows = await lm.prefix_next_token_logprobs([2, 3, 4])
    assert lm.calls == 3
    torch.testing.assert_close(rows, expected(lm.mock, [2, 3, 4]))
    torch.testing.assert_close(lm.prefix_next_token_logprobs_sync([2, 3, 4]), rows)
    with pytest.raises(InvalidTokenIdsError, match="empty"):
        await lm.prefix_next_token_logprobs([])
    torch.testing.assert_close(await lm.prefix_next_token_logprobs([2, 3, 4], start=2), rows[2:])


@pytest.mark.parametrize("cls", [PerPrefixMock, OneForwardMock, MockAsyncLM])
async def test_rows_asked_for_with_cache_false_are_not_cached(tokenizer, cls):
    """Rows read once (the exact prefill's) must not evict the rows others read again."""
    lm, ref = cls(tokenizer), MockAsyncLM(tokenizer, cache_size=0)
    ids = [5, 6, 7, 8, 9]
    await lm.next_token_logprobs(ids[:3])  # cached: used, and kept
    rows = await lm.prefix_next_token_logprobs(ids, start=1, cache=False)
    assert torch.equal(rows, expected(ref, ids)[1:])
    batch = await lm.batch_next_token_logprobs([[1, 2], [3]], cache=False)
    assert torch.equal(batch, ref.batch_next_token_logprobs_sync([[1, 2], [3]]))
    assert lm.cache.keys() == [Request((5, 6, 7), None)]
    assert torch.equal(await lm.next_token_logprobs([1, 2]), batch[0])  # computed again
    assert Request((1, 2), None) in lm.cache  # and cached, asked for as usual
    lm.cleanup()
    ref.cleanup()


@pytest.mark.parametrize("n", [5, LONG_PROMPT + 40])
async def test_the_mocks_own_hook_gives_each_prefix_its_next_token_row(tokenizer, n):
    """MockAsyncLM answers a sequence in one call (as genlm-hf): short and long prefixes."""
    lm, ref = MockAsyncLM(tokenizer), PerPrefixMock(tokenizer, cache_size=0)
    assert lm.computes_prefixes_in_one_forward
    ids = [(7 * i + 3) % 256 for i in range(n)]
    start = max(0, n - 60)  # across LONG_PROMPT when long
    rows = await lm.prefix_next_token_logprobs(ids, start=start)
    assert torch.equal(rows, await ref.prefix_next_token_logprobs(ids, start=start))
    assert lm.batches == [n - start]
    for j in (0, n - start - 1):  # stored under the keys a next-token call makes
        assert torch.equal(lm.next_token_logprobs_sync(ids[: start + j + 1]), rows[j])
    assert lm.batches == [n - start]
    lm.cleanup()
    ref.cleanup()


async def test_rows_read_once_make_no_key_per_prefix(tokenizer, monkeypatch):
    """With cache=False a long context's prefixes are looked up by keys that copy no ids
    and computed without one key each: rows x context would be quadratic in a text."""
    lm = MockAsyncLM(tokenizer)
    ids = [(5 * i + 1) % 256 for i in range(3 * LONG_PROMPT)]
    await lm.next_token_logprobs(ids[: 2 * LONG_PROMPT + 1])  # one row cached
    ref = PerPrefixMock(tokenizer)
    expected_rows = ref.prefix_next_token_logprobs_sync(ids, start=10)
    ref.cleanup()
    hits = lm.cache.hits

    def no_keys(self):
        raise AssertionError("a key was made for every prefix")

    monkeypatch.setattr(PrefixRequest, "prefixes", no_keys)
    rows = await lm.prefix_next_token_logprobs(ids, start=10, cache=False)
    assert torch.equal(rows, expected_rows)
    assert lm.cache.hits == hits + 1  # the cached row, found by a key that copied nothing
    assert len(lm.cache) == 1
    lm.cleanup()


async def test_a_prefix_calls_rows_stay_the_callers_while_held(tokenizer):
    """Prefix calls of one shape are stacked into recycled memory (StackPool): a result's
    memory is never given again while the caller holds it, or a view of it."""
    lm, ref = MockAsyncLM(tokenizer), PerPrefixMock(tokenizer, cache_size=0)
    held = await lm.prefix_next_token_logprobs([1, 2, 3, 4], cache=False)
    view = held[2]
    pointers = set()
    for i in range(4):
        ids = [5 + i, 6, 7, 8]
        rows = await lm.prefix_next_token_logprobs(ids, cache=False)
        assert torch.equal(rows, ref.prefix_next_token_logprobs_sync(ids))
        pointers.add(rows.data_ptr())
        del rows
    assert torch.equal(held, ref.prefix_next_token_logprobs_sync([1, 2, 3, 4]))
    assert torch.equal(view, held[2]) and held.data_ptr() not in pointers
    lm.cleanup()
    ref.cleanup()

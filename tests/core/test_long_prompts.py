"""Long prompts (issue 27): checked as strictly as short ones, hashed once, each row the same.

A prompt of 256 tokens or more is checked by C loops and kept as a ``LongTokenIds``
(a tuple that hashes once): a 1 MB text reads contexts of 250k tokens, each looked up
about ten times on its way through the output cache and the batcher.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from genlm_core.errors import InvalidTokenIdsError
from genlm_core.lm._requests import LONG_PROMPT, LongTokenIds, Request
from genlm_core.testing import ByteTokenizer, MockAsyncLM

N = 3 * LONG_PROMPT  # a long prompt


@pytest.fixture
def lm():
    model = MockAsyncLM(ByteTokenizer())
    yield model
    model.cleanup()


def long_prompt(n: int = N) -> list[int]:
    return [(7 * i) % 256 for i in range(n)]


@pytest.mark.parametrize(
    ("bad", "shown"),
    [
        (True, "= True is a bool"),
        (2.0, "= 2.0 is a float"),
        (257, "= 257 is out of range"),
        (-1, "= -1 is out of range"),
        (2**70, f"= {2**70} is out of range"),
    ],
)
def test_a_bad_id_deep_in_a_long_prompt_is_named_by_its_position(lm, bad, shown):
    ids = long_prompt()
    ids[N - 5] = bad
    with pytest.raises(InvalidTokenIdsError, match=rf"token_ids\[{N - 5}\] {shown}"):
        lm.next_token_logprobs_sync(ids)


def test_numpy_ids_in_a_long_prompt_are_plain_ints_in_its_request(lm):
    ids = np.array(long_prompt(), dtype=np.int32)
    request = lm.make_request(list(ids))
    assert all(type(t) is int for t in request.token_ids)
    assert request.token_ids == tuple(long_prompt())


def test_a_long_prompt_hashes_once_and_finds_its_plain_tuple_twin(lm):
    request = lm.make_request(long_prompt())
    assert type(request.token_ids) is LongTokenIds
    plain = Request(tuple(long_prompt()), None, 0)
    assert request == plain and hash(request) == hash(plain)
    assert {plain: "row"}[request] == "row" and {request: "row"}[plain] == "row"
    short = lm.make_request(long_prompt(LONG_PROMPT - 1))
    assert type(short.token_ids) is tuple  # short prompts stay plain tuples


async def test_long_prompt_rows_equal_their_short_and_prefix_twins(lm):
    """The same context gives the same row by every path and is computed once."""
    ids = long_prompt(N + 4)
    prefix_rows = await lm.prefix_next_token_logprobs(ids, start=N)
    computed = lm.batch_info()["requests"]
    for j, row in enumerate(prefix_rows):  # served by the cache: the same keys
        assert torch.equal(row, await lm.next_token_logprobs(ids[: N + j + 1]))
    assert lm.batch_info()["requests"] == computed
    fresh = MockAsyncLM(ByteTokenizer(), cache_size=0)
    try:  # the mock's row depends on the ids only, never on the tuple's type
        assert torch.equal(prefix_rows[-1], fresh.next_token_logprobs_sync(tuple(ids)))
    finally:
        fresh.cleanup()


def test_long_prompts_are_not_walked_by_the_cyclic_collector(lm):
    """A tuple subclass is never untracked by CPython itself: every collection would read
    every id of every cached long context (a 50 KB text: 18M ids, young collections
    growing to 0.1 s as the contexts grew)."""
    import gc

    request = lm.make_request(long_prompt())
    assert not gc.is_tracked(request.token_ids)
    assert hash(request.token_ids) == hash(tuple(long_prompt()))  # its hash, kept after
    assert not gc.is_tracked(request.token_ids)
    prefix = lm.make_prefix_request(long_prompt(), None, N - 2)
    assert not any(gc.is_tracked(p.token_ids) for p in prefix.prefixes())

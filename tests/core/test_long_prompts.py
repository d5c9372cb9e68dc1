"""Long prompts (issue 27): checked as strictly as short ones, hashed once, each row the same.

A prompt of 256 tokens or more is checked by C loops and kept as a ``LongTokenIds``
(a tuple that hashes once): a 1 MB text reads contexts of 250k tokens, each looked up
about ten times on its way through the output cache and the batcher. A prefix call's
keys are hashed in one pass over the ids (issue 39), not one pass each.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from genlm_core.errors import InvalidTokenIdsError
from genlm_core.lm._requests import LONG_PROMPT, LongTokenIds, Request, token_ids_key
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


def test_a_long_prompt_hashes_once_and_equals_its_plain_tuple_twin(lm):
    request = lm.make_request(long_prompt())
    assert type(request.token_ids) is LongTokenIds
    plain = Request(tuple(long_prompt()), None, 0)
    assert request == plain and request.token_ids == tuple(long_prompt())
    keyed = Request(token_ids_key(tuple(long_prompt())), None, 0)  # how long keys are made
    assert hash(request) == hash(keyed) and {keyed: "row"}[request] == "row"
    short = lm.make_request(long_prompt(LONG_PROMPT - 1))
    assert type(short.token_ids) is tuple  # short prompts stay plain tuples


def test_every_prefix_key_hashes_like_the_same_ids_made_directly(lm):
    """A prefix call's keys are hashed in one pass; each must find the row a next-token
    call of the same ids stores, and differ from its neighbours (an id 0 appended too)."""
    ids = long_prompt(N + 40)
    ids[N + 5] = 0
    prefix = lm.make_prefix_request(ids, None, LONG_PROMPT - 3)
    keys = prefix.prefixes()
    assert [len(k.token_ids) for k in keys] == list(range(LONG_PROMPT - 2, N + 41))
    for key in keys:
        direct = lm.make_request(ids[: len(key.token_ids)])
        assert key == direct and hash(key) == hash(direct)
        assert type(key.token_ids) is type(direct.token_ids)
    assert len({hash(k.token_ids) for k in keys}) == len(keys)
    assert prefix.prefixes() is keys  # made once: the model and its worker share them
    assert prefix.without_first(7).prefixes() == keys[7:]
    assert prefix.without_first(7).start == prefix.start + 7


def test_a_long_keys_hash_is_the_same_in_every_process():
    """The mock's rows (and any on-disk use of a key's hash) rely on it not being salted."""
    import subprocess
    import sys

    code = (
        "from genlm_core.lm._requests import token_ids_key;"
        f"print(hash(token_ids_key(tuple(range({N})))))"
    )
    runs = {
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        for _ in range(2)
    }
    assert runs == {str(hash(token_ids_key(tuple(range(N)))))}


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
    assert hash(request.token_ids) == hash(token_ids_key(tuple(long_prompt())))  # kept after
    assert not gc.is_tracked(request.token_ids)
    prefix = lm.make_prefix_request(long_prompt(), None, N - 2)
    assert not any(gc.is_tracked(p.token_ids) for p in prefix.prefixes())

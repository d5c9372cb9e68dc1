"""Arguments are checked where they are given, with errors that name the value and the fix."""

import asyncio
import re

import pytest
import torch

from genlm_core import load_model_by_name
from genlm_core.errors import BackendContractError, GenlmError
from genlm_core.testing import ByteTokenizer, MockAsyncLM


@pytest.fixture(scope="module")
def tokenizer():
    return ByteTokenizer()


def test_a_misspelled_llm_opt_names_backend_option_valid_ones_and_the_fix():
    with pytest.raises(TypeError) as info:
        load_model_by_name("bytes", backend="mock", llm_opts={"batchsize": 8})
    err = info.value
    assert isinstance(err, GenlmError), repr(err)
    assert type(err).__name__ == "InvalidOptionError"
    message = str(err)
    assert "backend 'mock'" in message and "'batchsize'" in message
    assert "did you mean 'batch_size'?" in message
    for valid in ("batch_size", "max_wait", "cache_size", "temperature"):
        assert valid in message


def test_an_unknown_option_of_a_constructor_names_the_class(tokenizer):
    with pytest.raises(GenlmError, match=r"MockAsyncLM.*'cache_sise'.*'cache_size'"):
        MockAsyncLM(tokenizer, cache_sise=10)


@pytest.mark.parametrize("bad", [-5, float("nan"), float("inf"), "0.1", True])
def test_max_wait_is_checked_at_construction(tokenizer, bad):
    with pytest.raises(ValueError, match=rf"max_wait must be a finite number .*{bad!r}"):
        MockAsyncLM(tokenizer, max_wait=bad)
    with pytest.raises(ValueError, match=rf"timeout .*{bad!r}"):
        MockAsyncLM(tokenizer, timeout=bad)


def test_timeout_and_max_wait_together_is_an_error(tokenizer):
    with pytest.raises(ValueError, match="timeout=0.1 and max_wait=0.2"):
        MockAsyncLM(tokenizer, timeout=0.1, max_wait=0.2)
    assert MockAsyncLM(tokenizer, timeout=0.1).max_wait == 0.1  # genlm-backend's name alone


@pytest.mark.parametrize("bad", [True, 0, -1, 2.0, "8"])
def test_batch_size_must_be_a_positive_int(tokenizer, bad):
    with pytest.raises(ValueError, match=rf"batch_size must be an integer >= 1, got {bad!r}"):
        MockAsyncLM(tokenizer, batch_size=bad)


@pytest.mark.parametrize("name, bad", [("cache_size", -1), ("cache_size", True)])
def test_cache_size_is_checked(tokenizer, name, bad):
    with pytest.raises(ValueError, match=rf"{name} .*{bad!r}"):
        MockAsyncLM(tokenizer, **{name: bad})


@pytest.mark.parametrize("eos", [[2.9], [True], ["2"], [None]])
async def test_eos_ids_must_be_integers(tokenizer, eos):
    with MockAsyncLM(tokenizer) as lm:
        with pytest.raises(ValueError, match=r"eos_token_ids\[0\]"):
            await lm.sample([1], max_tokens=2, eos_token_ids=eos)


@pytest.mark.parametrize("seed", [2.5, "3", True])
async def test_seed_must_be_an_integer(tokenizer, seed):
    with MockAsyncLM(tokenizer) as lm:
        with pytest.raises(ValueError, match=rf"seed must be an integer or None, got {seed!r}"):
            await lm.sample([1], max_tokens=2, eos_token_ids=[], seed=seed)


def test_numpy_integers_stay_valid_eos_ids_and_seeds(tokenizer):
    import numpy as np

    with MockAsyncLM(tokenizer) as lm:
        out = asyncio.run(
            lm.sample([1], max_tokens=3, eos_token_ids=np.array([0]), seed=np.int64(4))
        )
        assert len(out) <= 3


class NotedRows(MockAsyncLM):
    """Writes ``values`` into a pooled row for the prompt [66] and notes its maximum."""

    def __init__(self, tokenizer, value, **kwargs):
        super().__init__(tokenizer, **kwargs)
        self.value = value

    def compute_batch(self, requests):
        rows = list(super().compute_batch(requests))
        for i, r in enumerate(requests):
            if r.token_ids == (66,):
                rows[i][7] = self.value
                self.row_pool.note_maximum(rows[i])
        return rows


@pytest.mark.parametrize(
    "value, fragment", [(float("nan"), "NaN"), (float("inf"), "+inf"), (2.5, "2.5 > 0")]
)
async def test_the_row_check_reads_maxima_noted_in_the_pool_and_still_refuses(
    tokenizer, value, fragment
):
    with NotedRows(tokenizer, value) as lm:
        good, bad = await asyncio.gather(
            lm.next_token_logprobs([65]), lm.next_token_logprobs([66]), return_exceptions=True
        )
        assert isinstance(good, torch.Tensor)
        assert isinstance(bad, BackendContractError) and fragment in str(bad), bad
        assert lm.row_pool.take_maxima([good]) == [None]  # the caller's copy is not pooled


class RowMaker(MockAsyncLM):
    """Returns one bad row for the prompt [66]; good rows for every other prompt."""

    def __init__(self, tokenizer, bad_row, **kwargs):
        super().__init__(tokenizer, **kwargs)
        self.bad_row = bad_row

    def compute_batch(self, requests):
        rows = list(super().compute_batch(requests))
        return [
            self.bad_row(row) if r.token_ids == (66,) else row
            for r, row in zip(requests, rows, strict=True)
        ]


def nan_row(row):
    row = row.clone()
    row[3] = float("nan")
    return row


@pytest.mark.parametrize(
    "bad_row, fragment",
    [
        (nan_row, "NaN"),
        (lambda row: row.double(), "float64"),
        (lambda row: row[:-1].clone(), "shape (256,)"),
        (lambda row: row.clone().fill_(float("inf")), "+inf"),
        (lambda row: row.tolist(), "list"),
    ],
)
async def test_a_bad_row_fails_its_own_request_and_names_it(tokenizer, bad_row, fragment):
    with RowMaker(tokenizer, bad_row) as lm:
        good, bad, other = await asyncio.gather(
            lm.next_token_logprobs([65]),
            lm.next_token_logprobs([66]),
            lm.next_token_logprobs([67]),
            return_exceptions=True,
        )
        assert isinstance(good, torch.Tensor) and isinstance(other, torch.Tensor)
        assert isinstance(bad, BackendContractError), bad
        message = str(bad)
        assert fragment in message and "RowMaker.compute_batch" in message
        assert "token_ids=(66,)" in message
        with pytest.raises(BackendContractError, match=re.escape(fragment)):
            lm.next_token_logprobs_sync([66])  # not cached: asked again, refused again
        assert lm.output_cache_info()["entries"] == 2

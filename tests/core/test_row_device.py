"""Rows on a model's device: what the core checks and copies, testable without a GPU.

The batched check (one reduction and one read-back per batch) and the multi-tensor
copies run here on CPU tensors; the same path on a GPU, with the count of host
synchronisations, is tested in ``tests/hf/test_cuda.py`` (cuda-marked).
"""

from __future__ import annotations

import asyncio
import math

import pytest
import torch

from genlm_core.errors import BackendContractError
from genlm_core.lm import BatchedAsyncLM, _rows
from genlm_core.testing import ByteTokenizer


def test_batched_maxima_see_nan_and_inf_per_row(monkeypatch):
    rows = [torch.log_softmax(torch.randn(300), 0) for _ in range(7)]
    rows[2] = rows[2].clone()
    rows[2][17] = float("nan")
    rows[5] = rows[5].clone()
    rows[5][0] = math.inf
    # chunks of two rows: the order of the maxima survives the chunking
    monkeypatch.setattr(_rows, "CHECK_CHUNK_BYTES", 2 * rows[0].nbytes)
    got = _rows.batched_row_maxima(rows)
    want = [row.max().item() for row in rows]
    assert math.isnan(got[2]) and got[5] == math.inf
    assert [g for i, g in enumerate(got) if i != 2] == [w for i, w in enumerate(want) if i != 2]


def test_private_rows_are_copies_of_their_own():
    batch = torch.randn(4, 10)
    rows = list(batch.unbind(0))
    copies = _rows.private_rows(rows)
    for row, copy in zip(rows, copies, strict=True):
        assert torch.equal(row, copy)
        assert copy.untyped_storage().data_ptr() != batch.untyped_storage().data_ptr()
    copies[0].fill_(0)
    assert not torch.equal(rows[0], copies[0])
    assert _rows.private_rows([]) == []


class DeclaredElsewhere(BatchedAsyncLM):
    """Declares rows on ``meta`` but computes them on the CPU: a contract violation."""

    def compute_batch(self, requests):
        n = len(self.byte_vocab)
        return [torch.full((n,), -math.log(n)) for _ in requests]


async def test_rows_on_another_device_than_declared_fail_with_both_named():
    lm = DeclaredElsewhere(ByteTokenizer(), row_device="meta", cache_size=0)
    assert lm.row_device == torch.device("meta")
    with pytest.raises(BackendContractError, match=r"a tensor on cpu.*a float32 meta tensor"):
        await lm.next_token_logprobs([1, 2])
    empty = await lm.batch_next_token_logprobs([])
    assert empty.shape == (0, len(lm.byte_vocab)) and empty.device == torch.device("meta")
    lm.cleanup()


class Uniform(BatchedAsyncLM):
    def compute_batch(self, requests):
        n = len(self.byte_vocab)
        return list(torch.full((len(requests), n), -math.log(n)).unbind(0))  # views of one batch


async def test_cpu_is_the_default_and_views_are_owned_before_caching():
    lm = Uniform(ByteTokenizer())
    assert lm.row_device == torch.device("cpu")
    rows = await asyncio.gather(*(lm.next_token_logprobs([i + 1]) for i in range(5)))
    cached = [lm.cache.get(k) for k in lm.cache.keys()]
    assert len(cached) == 5
    for row in cached:  # a view would keep the whole batch alive in the cache
        assert row.untyped_storage().nbytes() == row.nbytes
    for row in rows:
        assert row.device.type == "cpu"
    lm.cleanup()

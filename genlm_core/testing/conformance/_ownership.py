"""Every tensor a caller receives is its own: masking it in place changes no other answer.

Samplers mask log-probs in place (``logps[mask] = -inf``). If two callers, or a caller
and the output cache, shared one tensor, that would silently rewrite the other's
answer and every later one. Part of [`AsyncLMConformance`][genlm_core.testing.AsyncLMConformance].
"""

from __future__ import annotations

import asyncio
from typing import Any

import torch

__all__ = ["OwnershipCases"]


def _spoil(row: torch.Tensor) -> None:
    """What a careless caller does to its own row: mask the top token, then everything."""
    row.masked_fill_(row == row.max(), float("-inf"))
    row.fill_(float("nan"))


class OwnershipCases:
    """Rows handed out by every call are independent of each other and of the cache."""

    atol: float

    async def _reference(self, lm: Any, ids: list[int]) -> torch.Tensor:
        out = await lm.next_token_logprobs(ids)
        pristine = out.clone()
        _spoil(out)  # the caller's own copy: spoiling it must not matter below
        return pristine

    def _assert_pristine(self, row: torch.Tensor, pristine: torch.Tensor) -> None:
        assert not torch.isnan(row).any(), "a row changed when another caller masked its own"
        torch.testing.assert_close(row, pristine, atol=self.atol, rtol=0)

    async def test_concurrent_identical_calls_get_their_own_rows(
        self, lm: Any, prompts: list[list[int]]
    ) -> None:
        ids = prompts[2]
        a, b, c = await asyncio.gather(*(lm.next_token_logprobs(ids) for _ in range(3)))
        pristine = b.clone()
        _spoil(a)
        self._assert_pristine(b, pristine)
        self._assert_pristine(c, pristine)
        assert a.data_ptr() != b.data_ptr() != c.data_ptr()

    async def test_a_masked_row_does_not_reach_later_calls(
        self, lm: Any, prompts: list[list[int]]
    ) -> None:
        ids = prompts[1]
        pristine = await self._reference(lm, ids)
        later = await lm.next_token_logprobs(ids)  # an output-cache hit, where there is one
        self._assert_pristine(later, pristine)
        _spoil(later)
        synced = lm.next_token_logprobs_sync(ids)
        self._assert_pristine(synced, pristine)
        _spoil(synced)
        batch = await lm.batch_next_token_logprobs([ids, prompts[0], ids])
        self._assert_pristine(batch[0], pristine)
        self._assert_pristine(batch[2], pristine)
        _spoil(batch[0])
        self._assert_pristine(batch[2], pristine)
        sync_batch = lm.batch_next_token_logprobs_sync([ids, ids])
        _spoil(sync_batch[0])
        self._assert_pristine(sync_batch[1], pristine)
        self._assert_pristine(await lm.next_token_logprobs(ids), pristine)

    async def test_prefix_rows_are_the_callers_own(self, lm: Any, prompts: list[list[int]]) -> None:
        ids = prompts[2] + prompts[0]
        first, second = await asyncio.gather(
            lm.prefix_next_token_logprobs(ids), lm.prefix_next_token_logprobs(ids)
        )
        pristine = second.clone()
        _spoil(first)
        assert not torch.isnan(second).any()
        torch.testing.assert_close(second, pristine, atol=0, rtol=0)
        again = await lm.prefix_next_token_logprobs(ids)  # cached rows, where there are
        torch.testing.assert_close(again, pristine, atol=self.atol, rtol=0)
        _spoil(again)
        tail = lm.prefix_next_token_logprobs_sync(ids, start=1)
        torch.testing.assert_close(tail, pristine[1:], atol=self.atol, rtol=0)
        _spoil(tail)
        row = await lm.next_token_logprobs(ids[:2])
        torch.testing.assert_close(row, pristine[1], atol=self.atol, rtol=0)

"""The contract's basic invariants: shapes, equivalences, prefixes, bad input, lifecycle.

Part of [`AsyncLMConformance`][genlm_core.testing.AsyncLMConformance] (see its package docstring).
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest
import torch

from genlm_core.errors import GenlmError, InvalidTokenIdsError, ModelClosedError, UnknownLoraError

__all__ = ["ContractCases"]


class ContractCases:
    """Shapes, normalisation, equivalences, prefix rows, bad input, sampling, lifecycle."""

    #: Absolute tolerance when comparing results computed in different batch shapes.
    atol: float = 1e-5
    #: Number of concurrent requests in the concurrency tests.
    n_concurrent: int = 12
    #: Absolute tolerance between ``prefix_next_token_logprobs`` rows and next-token
    #: calls (one forward over the sequence against one per prefix).
    prefix_atol: float = 1e-4

    @pytest.fixture
    def lm(self) -> Any:  # pragma: no cover - must be overridden
        """The model under test. Subclasses must override this fixture."""
        raise NotImplementedError("define an `lm` fixture in your AsyncLMConformance subclass")

    @pytest.fixture
    def prompts(self, lm: Any) -> list[list[int]]:
        """Prompts with shared prefixes, duplicates and mixed lengths (valid token ids)."""
        text = ["Hello", "Hello, world", "The capital of France is", "a", "1, 2, 3, 4,"]
        encoded = [lm.tokenizer.encode(t, add_special_tokens=False) or [0] for t in text]
        return [*encoded, encoded[1], encoded[2][:2]]

    # -- shape and normalisation ------------------------------------------------

    async def test_logprobs_shape_and_dtype(self, lm: Any, prompts: list[list[int]]) -> None:
        out = await lm.next_token_logprobs(prompts[0])
        assert isinstance(out, torch.Tensor)
        assert out.shape == (len(lm.byte_vocab),)
        assert out.dtype == torch.float32
        assert out.device == row_device(lm)
        assert len(lm.str_vocab) == len(lm.byte_vocab)

    async def test_logprobs_normalised(self, lm: Any, prompts: list[list[int]]) -> None:
        for ids in prompts:
            out = await lm.next_token_logprobs(ids)
            assert not torch.isnan(out).any()
            assert abs(torch.logsumexp(out.double(), dim=0).item()) < 1e-4

    def test_byte_vocab_token_ids(self, lm: Any) -> None:
        assert all(tok.token_id == i for i, tok in enumerate(lm.byte_vocab))

    def test_byte_vocab_round_trip(self, lm: Any, prompts: list[list[int]]) -> None:
        for ids in prompts:
            text = lm.tokenizer.decode(ids, clean_up_tokenization_spaces=False)
            if "\ufffd" in text:
                continue  # a prompt splitting a UTF-8 character cannot round-trip through str
            joined = b"".join(lm.byte_vocab[i] for i in ids)
            assert joined.decode("utf-8").lstrip(" ") == text.lstrip(" ")

    # -- equivalences -------------------------------------------------------------

    async def test_sync_equals_async(self, lm: Any, prompts: list[list[int]]) -> None:
        for ids in prompts[:3]:
            a = await lm.next_token_logprobs(ids)
            lm.clear_cache()
            s = lm.next_token_logprobs_sync(ids)
            torch.testing.assert_close(a, s, atol=self.atol, rtol=0)

    async def test_batch_equals_individual(self, lm: Any, prompts: list[list[int]]) -> None:
        batch = await lm.batch_next_token_logprobs(prompts)
        assert batch.shape == (len(prompts), len(lm.byte_vocab))
        lm.clear_cache()
        for row, ids in zip(batch, prompts, strict=True):
            torch.testing.assert_close(
                row, lm.next_token_logprobs_sync(ids), atol=self.atol, rtol=0
            )
            lm.clear_cache()

    def test_batch_sync_equals_async(self, lm: Any, prompts: list[list[int]]) -> None:
        s = lm.batch_next_token_logprobs_sync(prompts)
        lm.clear_cache()
        a = asyncio.run(lm.batch_next_token_logprobs(prompts))
        torch.testing.assert_close(a, s, atol=self.atol, rtol=0)

    async def test_concurrent_equals_sequential(self, lm: Any, prompts: list[list[int]]) -> None:
        requests = [prompts[i % len(prompts)] for i in range(self.n_concurrent)]
        concurrent = await asyncio.gather(*(lm.next_token_logprobs(ids) for ids in requests))
        lm.clear_cache()
        for ids, out in zip(requests, concurrent, strict=True):
            torch.testing.assert_close(
                out, await lm.next_token_logprobs(ids), atol=self.atol, rtol=0
            )
            lm.clear_cache()

    async def test_deterministic(self, lm: Any, prompts: list[list[int]]) -> None:
        first = await lm.next_token_logprobs(prompts[2])
        lm.clear_cache()
        torch.testing.assert_close(
            first, await lm.next_token_logprobs(prompts[2]), atol=self.atol, rtol=0
        )

    # -- prefix log-probabilities ---------------------------------------------------

    async def test_prefix_logprobs_equal_next_token_calls(
        self, lm: Any, prompts: list[list[int]]
    ) -> None:
        ids = prompts[2] + prompts[1]  # a longer sequence
        rows = await lm.prefix_next_token_logprobs(ids)
        assert isinstance(rows, torch.Tensor) and rows.dtype == torch.float32
        assert rows.shape == (len(ids), len(lm.byte_vocab)) and rows.device == row_device(lm)
        lm.clear_cache()
        for i in range(len(ids)):
            torch.testing.assert_close(
                rows[i], await lm.next_token_logprobs(ids[: i + 1]), atol=self.prefix_atol, rtol=0
            )

    async def test_prefix_logprobs_after_cached_prefix_and_concurrent(
        self, lm: Any, prompts: list[list[int]]
    ) -> None:
        ids = prompts[2] + prompts[0]
        head = await lm.next_token_logprobs(ids[:2])  # part of the sequence computed first
        rows, again, other = await asyncio.gather(
            lm.prefix_next_token_logprobs(ids),
            lm.prefix_next_token_logprobs(ids),
            lm.next_token_logprobs(ids[:3]),
        )
        torch.testing.assert_close(rows, again, atol=self.atol, rtol=0)
        torch.testing.assert_close(rows[1], head, atol=self.prefix_atol, rtol=0)
        torch.testing.assert_close(rows[2], other, atol=self.prefix_atol, rtol=0)
        lm.clear_cache()
        sync = lm.prefix_next_token_logprobs_sync(ids)
        torch.testing.assert_close(rows, sync, atol=self.prefix_atol, rtol=0)
        tail = await lm.prefix_next_token_logprobs(ids, start=len(ids) - 2)
        assert tail.shape == (2, len(lm.byte_vocab))
        torch.testing.assert_close(tail, rows[-2:], atol=self.prefix_atol, rtol=0)

    async def test_prefix_logprobs_bad_input(self, lm: Any, prompts: list[list[int]]) -> None:
        n = len(lm.byte_vocab)
        with pytest.raises(InvalidTokenIdsError, match="empty"):
            await lm.prefix_next_token_logprobs([])
        with pytest.raises(InvalidTokenIdsError, match=str(n + 3)):
            await lm.prefix_next_token_logprobs([0, n + 3])
        with pytest.raises(UnknownLoraError, match="no-such-adapter"):
            await lm.prefix_next_token_logprobs(prompts[0], lora_name="no-such-adapter")
        with pytest.raises(InvalidTokenIdsError):
            lm.prefix_next_token_logprobs_sync([n])
        with pytest.raises(ValueError, match="start"):
            await lm.prefix_next_token_logprobs(prompts[0], start=len(prompts[0]))

    # -- robustness ---------------------------------------------------------------

    async def test_cancelled_request_does_not_poison_batch(
        self, lm: Any, prompts: list[list[int]]
    ) -> None:
        tasks = [asyncio.ensure_future(lm.next_token_logprobs(ids)) for ids in prompts]
        await asyncio.sleep(0)  # let them queue
        tasks[0].cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(results[0], asyncio.CancelledError) or isinstance(
            results[0], torch.Tensor
        )
        for ids, out in zip(prompts[1:], results[1:], strict=True):
            assert isinstance(out, torch.Tensor), out
            lm.clear_cache()
            torch.testing.assert_close(
                out, lm.next_token_logprobs_sync(ids), atol=self.atol, rtol=0
            )
        # and the model still works afterwards
        assert (await lm.next_token_logprobs(prompts[0])).shape == (len(lm.byte_vocab),)

    async def test_bad_request_fails_alone(self, lm: Any, prompts: list[list[int]]) -> None:
        bad = [len(lm.byte_vocab)]  # one past the last id
        results = await asyncio.gather(
            lm.next_token_logprobs(prompts[0]),
            lm.next_token_logprobs(bad),
            lm.next_token_logprobs(prompts[1]),
            return_exceptions=True,
        )
        assert isinstance(results[1], InvalidTokenIdsError)
        assert isinstance(results[0], torch.Tensor) and isinstance(results[2], torch.Tensor)

    @pytest.mark.parametrize(
        "bad, fragment",
        [([], "empty"), ([-1], "-1"), (["a"], "'a'"), ([1.5], "1.5"), ("hello", "str")],
    )
    async def test_invalid_token_ids(self, lm: Any, bad: Any, fragment: str) -> None:
        with pytest.raises(InvalidTokenIdsError) as info:
            await lm.next_token_logprobs(bad)
        assert isinstance(info.value, ValueError) and isinstance(info.value, GenlmError)
        assert fragment in str(info.value)
        with pytest.raises(InvalidTokenIdsError):
            lm.next_token_logprobs_sync(bad)

    async def test_bad_prompt_of_a_batch_is_named(self, lm: Any, prompts: list[list[int]]) -> None:
        n = len(lm.byte_vocab)
        batch = [prompts[0], prompts[1], [0, n + 3]]
        pattern = rf"token_ids_list\[2\].*{n + 3}"
        with pytest.raises(InvalidTokenIdsError, match=pattern):
            await lm.batch_next_token_logprobs(batch)
        with pytest.raises(InvalidTokenIdsError, match=pattern):
            lm.batch_next_token_logprobs_sync(batch)

    async def test_out_of_range_names_value(self, lm: Any) -> None:
        n = len(lm.byte_vocab)
        with pytest.raises(ValueError, match=str(n + 7)):
            await lm.next_token_logprobs([0, n + 7])

    async def test_unknown_lora(self, lm: Any, prompts: list[list[int]]) -> None:
        with pytest.raises(UnknownLoraError, match="no-such-adapter"):
            await lm.next_token_logprobs(prompts[0], lora_name="no-such-adapter")
        with pytest.raises(KeyError):
            lm.next_token_logprobs_sync(prompts[0], lora_name="no-such-adapter")

    # -- sampling -----------------------------------------------------------------

    async def test_sample_seeded_and_bounded(self, lm: Any, prompts: list[list[int]]) -> None:
        a = await lm.sample(prompts[2], max_tokens=5, eos_token_ids=[], temperature=1.0, seed=7)
        b = await lm.sample(prompts[2], max_tokens=5, eos_token_ids=[], temperature=1.0, seed=7)
        assert a == b and len(a) == 5
        assert all(0 <= t < len(lm.byte_vocab) for t in a)
        many = await lm.batch_sample(
            [prompts[0], prompts[1]], max_tokens=3, eos_token_ids=[], seed=1
        )
        assert len(many) == 2 and all(len(s) == 3 for s in many)

    async def test_sample_stops_at_eos(self, lm: Any, prompts: list[list[int]]) -> None:
        everything = list(range(len(lm.byte_vocab)))
        assert await lm.sample(prompts[0], max_tokens=4, eos_token_ids=everything, seed=0) == []

    # -- lifecycle ----------------------------------------------------------------

    async def test_cleanup_is_idempotent_and_final(self, lm: Any, prompts: list[list[int]]) -> None:
        await lm.next_token_logprobs(prompts[0])
        lm.cleanup()
        lm.cleanup()
        with pytest.raises(ModelClosedError):
            await lm.next_token_logprobs(prompts[0])
        with pytest.raises(ModelClosedError):
            lm.next_token_logprobs_sync(prompts[0])
        gc.collect()

    def test_context_manager_cleans_up(self, lm: Any, prompts: list[list[int]]) -> None:
        with lm as same:
            assert same is lm
            same.next_token_logprobs_sync(prompts[0])
        with pytest.raises(ModelClosedError):
            lm.next_token_logprobs_sync(prompts[0])


def row_device(lm: Any) -> torch.device:
    """Where ``lm``'s rows must live: its ``row_device`` (the CPU for backends without one)."""
    return torch.device(getattr(lm, "row_device", "cpu"))

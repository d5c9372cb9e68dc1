"""LoRA adapters never go stale: replaced or removed adapters are never served again.

For backends that load LoRA adapters. Subclass [`LoraConformance`][] with an ``lm``
fixture (a model of its own: the tests add and remove adapters) and a
``lora_adapters`` fixture returning two adapter paths for that model whose outputs
differ (two versions of "an adapter").
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch

from genlm_core.errors import UnknownLoraError

__all__ = ["LoraConformance"]


def _differs(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a - b).abs().max().item() > 1e-3


class LoraConformance:
    """Adapters per request; replacing or removing one is seen by every later call."""

    #: Absolute tolerance between the same adapter's rows computed in different ways.
    lora_atol: float = 1e-4

    @pytest.fixture
    def lm(self) -> Any:  # pragma: no cover - must be overridden
        """A model of the test's own (adapters are added to it). Override this fixture."""
        raise NotImplementedError("define an `lm` fixture in your LoraConformance subclass")

    @pytest.fixture
    def lora_adapters(self) -> tuple[str, str]:  # pragma: no cover - must be overridden
        """Two adapter paths for ``lm``'s model whose outputs differ. Override this fixture."""
        raise NotImplementedError(
            "define a `lora_adapters` fixture returning two adapter paths in your "
            "LoraConformance subclass"
        )

    @pytest.fixture
    def lora_prompts(self, lm: Any) -> list[list[int]]:
        """Prompts valid for the model, some sharing prefixes."""
        text = ["Hello", "Hello, world", "The capital of France is", "1, 2, 3"]
        return [lm.tokenizer.encode(t, add_special_tokens=False) or [0] for t in text]

    def _close(self, a: torch.Tensor, b: torch.Tensor) -> None:
        torch.testing.assert_close(a, b, atol=self.lora_atol, rtol=0)

    async def _rows(self, lm: Any, prompts: list[list[int]], name: str | None) -> list[Any]:
        return list(await asyncio.gather(*(lm.next_token_logprobs(p, name) for p in prompts)))

    async def test_adapters_change_the_rows(
        self, lm: Any, lora_adapters: tuple[str, str], lora_prompts: list[list[int]]
    ) -> None:
        v1, v2 = lora_adapters
        lm.add_new_lora(v1, "a")
        lm.add_new_lora(v2, "b")
        assert sorted(lm.lora_names) == ["a", "b"]
        base, a, b = [await self._rows(lm, lora_prompts, n) for n in (None, "a", "b")]
        for row_base, row_a, row_b in zip(base, a, b, strict=True):
            assert _differs(row_a, row_base) and _differs(row_b, row_base)
            assert _differs(row_a, row_b), "the two test adapters must give different rows"

    async def test_a_replaced_adapter_is_never_served_again(
        self, lm: Any, lora_adapters: tuple[str, str], lora_prompts: list[list[int]]
    ) -> None:
        v1, v2 = lora_adapters
        lm.add_new_lora(v2, "reference")
        expected = await self._rows(lm, lora_prompts, "reference")
        lm.add_new_lora(v1, "a")
        old = await self._rows(lm, lora_prompts, "a")  # now in every cache there is
        await lm.prefix_next_token_logprobs(lora_prompts[2], "a")
        lm.add_new_lora(v2, "a")  # same name, new version
        new = await self._rows(lm, lora_prompts, "a")
        for row_old, row_new, row_expected in zip(old, new, expected, strict=True):
            assert _differs(row_new, row_old), "a later call got the replaced adapter's row"
            self._close(row_new, row_expected)
        self._close(lm.next_token_logprobs_sync(lora_prompts[0], "a"), expected[0])
        batch = await lm.batch_next_token_logprobs(lora_prompts, "a")
        for row, row_expected in zip(batch, expected, strict=True):
            self._close(row, row_expected)
        prefix = await lm.prefix_next_token_logprobs(lora_prompts[2], "a")
        self._close(prefix[-1], expected[2])

    async def test_replacing_while_calls_are_in_flight(
        self, lm: Any, lora_adapters: tuple[str, str], lora_prompts: list[list[int]]
    ) -> None:
        v1, v2 = lora_adapters
        lm.add_new_lora(v1, "old")
        lm.add_new_lora(v2, "new")
        old, new = [await self._rows(lm, lora_prompts, n) for n in ("old", "new")]
        lm.add_new_lora(v1, "a")
        calls = [asyncio.ensure_future(lm.next_token_logprobs(p, "a")) for p in lora_prompts]
        await asyncio.sleep(0)  # the calls are queued or computing
        await asyncio.to_thread(lm.add_new_lora, v2, "a")
        after = await self._rows(lm, lora_prompts, "a")
        for row, row_new in zip(after, new, strict=True):
            self._close(row, row_new)
        for call, row_old, row_new in zip(calls, old, new, strict=True):
            row = await call  # started before the replacement: either version, never an error
            assert not _differs(row, row_old) or not _differs(row, row_new)

    async def test_removing_fails_only_that_adapters_calls(
        self, lm: Any, lora_adapters: tuple[str, str], lora_prompts: list[list[int]]
    ) -> None:
        v1, v2 = lora_adapters
        lm.add_new_lora(v1, "a")
        lm.add_new_lora(v2, "b")
        names = [None, "a", "b"]
        calls = [
            (name, asyncio.ensure_future(lm.next_token_logprobs(p, name)))
            for p in lora_prompts
            for name in names
        ]
        await asyncio.sleep(0)  # the calls are queued or computing
        lm.remove_lora("a")
        for name, call in calls:
            try:
                row = await call
            except UnknownLoraError:
                assert name == "a", f"removing 'a' failed a call for {name!r}"
            else:
                assert isinstance(row, torch.Tensor)
        with pytest.raises(UnknownLoraError, match="'a'"):
            await lm.next_token_logprobs(lora_prompts[0], "a")
        with pytest.raises(UnknownLoraError, match="'a'"):
            lm.next_token_logprobs_sync(lora_prompts[0], "a")
        with pytest.raises(UnknownLoraError, match="'a'"):
            lm.remove_lora("a")
        assert lm.lora_names == ["b"]
        lm.add_new_lora(v2, "a")  # the name again, another version: nothing cached survives
        b_rows = await self._rows(lm, lora_prompts, "b")
        for row, row_b in zip(await self._rows(lm, lora_prompts, "a"), b_rows, strict=True):
            self._close(row, row_b)

    async def test_bad_adapter_names(self, lm: Any, lora_adapters: tuple[str, str]) -> None:
        for bad in ("", None, 3):
            with pytest.raises(ValueError, match="lora_name"):
                lm.add_new_lora(lora_adapters[0], bad)
        assert lm.lora_names == []

"""The core's LoRA bookkeeping: generations, in-flight safety, hooks (MockAsyncLM).

The conformance suite (LoraConformance) checks what every backend must do; these
tests pin the core's exact behaviour: a queued request whose adapter was replaced is
computed with the new version, one whose adapter was removed fails alone.
"""

import asyncio
import threading

import pytest
import torch

from genlm_core.errors import UnknownLoraError
from genlm_core.lm import AsyncLMBase
from genlm_core.testing import ByteTokenizer, MockAsyncLM


@pytest.fixture
def adapters(tmp_path):
    paths = {}
    for version in ("v1", "v2"):
        path = tmp_path / version
        path.write_bytes(version.encode())
        paths[version] = str(path)
    return paths


@pytest.fixture
def lm():
    model = MockAsyncLM(ByteTokenizer(), max_wait=0.05)  # holds a batch: calls stay queued
    yield model
    model.cleanup()


async def reference(adapter_path, ids):
    """Rows of a fresh model with only that adapter, under another name."""
    with MockAsyncLM(ByteTokenizer()) as other:
        other.add_new_lora(adapter_path, "x")
        return await other.next_token_logprobs(ids, "x")


async def test_a_queued_call_of_a_removed_adapter_fails_alone(lm, adapters):
    lm.add_new_lora(adapters["v1"], "a")
    base = asyncio.ensure_future(lm.next_token_logprobs([1, 2]))
    styled = asyncio.ensure_future(lm.next_token_logprobs([1, 2], "a"))
    await asyncio.sleep(0)  # both are in the batcher, not yet computed
    lm.remove_lora("a")
    assert isinstance(await base, torch.Tensor)
    with pytest.raises(UnknownLoraError, match=r"'a' was removed"):
        await styled
    assert lm.batches == [1]  # only the base row was computed


async def test_a_queued_call_of_a_replaced_adapter_gets_the_new_version(lm, adapters):
    lm.add_new_lora(adapters["v1"], "a")
    queued = asyncio.ensure_future(lm.next_token_logprobs([1, 2], "a"))
    await asyncio.sleep(0)
    lm.add_new_lora(adapters["v2"], "a")
    later = await lm.next_token_logprobs([1, 2], "a")
    expected = await reference(adapters["v2"], [1, 2])
    torch.testing.assert_close(await queued, expected, atol=0, rtol=0)
    torch.testing.assert_close(later, expected, atol=0, rtol=0)
    assert sum(lm.batches) == 1  # the queued call and the later one: computed once


async def test_replacing_drops_the_old_versions_rows_and_keeps_the_others(lm, adapters):
    lm.add_new_lora(adapters["v1"], "a")
    lm.add_new_lora(adapters["v1"], "b")
    await asyncio.gather(*(lm.next_token_logprobs([i + 1], n) for i in range(3) for n in "ab"))
    await lm.next_token_logprobs([9])
    assert len(lm.cache) == 7
    lm.add_new_lora(adapters["v2"], "a")
    assert {key.lora_name for key in lm.cache.keys()} == {None, "b"}
    assert len(lm.cache) == 4


def test_a_failed_load_keeps_the_adapter_in_place(lm, adapters, tmp_path):
    lm.add_new_lora(adapters["v1"], "a")
    before = lm.next_token_logprobs_sync([3], "a")
    with pytest.raises(OSError, match="no-such-file"):
        lm.add_new_lora(str(tmp_path / "no-such-file"), "a")
    assert lm.lora_names == ["a"]
    torch.testing.assert_close(lm.next_token_logprobs_sync([3], "a"), before, atol=0, rtol=0)


def test_adapter_changes_wait_for_the_batch_computing(adapters):
    started, release = threading.Event(), threading.Event()
    order = []

    class Slow(MockAsyncLM):
        def compute_batch(self, requests):
            started.set()
            release.wait(10)
            order.append("computed")
            return super().compute_batch(requests)

        def load_adapter(self, adapter):
            order.append(f"load {adapter.name}")
            return super().load_adapter(adapter)

    lm = Slow(ByteTokenizer())
    worker = threading.Thread(target=lm.next_token_logprobs_sync, args=([5],))
    worker.start()
    assert started.wait(10)
    adder = threading.Thread(target=lm.add_new_lora, args=(adapters["v1"], "a"))
    adder.start()
    adder.join(0.2)
    assert adder.is_alive(), "add_new_lora ran while a batch was computing"
    release.set()
    worker.join(10)
    adder.join(10)
    assert order == ["computed", "load a"]
    lm.cleanup()


def test_generations_are_never_reused(lm, adapters):
    lm.add_new_lora(adapters["v1"], "a")
    first = lm.make_request([1], "a")
    lm.remove_lora("a")
    lm.add_new_lora(adapters["v1"], "a")
    second = lm.make_request([1], "a")
    assert first != second and second.generation > first.generation
    assert lm.make_request([1]).generation == 0


def test_a_backend_without_adapters_says_so():
    class NoLora(MockAsyncLM):
        load_adapter = AsyncLMBase.load_adapter  # the default: adapters unsupported

    with NoLora(ByteTokenizer()) as lm, pytest.raises(NotImplementedError, match="NoLora"):
        lm.add_new_lora("/some/adapter", "a")


def test_cleanup_goes_on_when_an_adapter_cannot_be_unloaded(adapters, caplog):
    class Gone(MockAsyncLM):
        def unload_adapter(self, adapter, handle):
            raise ConnectionError("the server is gone")

    lm = Gone(ByteTokenizer())
    lm.add_new_lora(adapters["v1"], "a")
    lm.add_new_lora(adapters["v2"], "b")
    lm.cleanup()
    assert lm.closed and lm.lora_names == []
    assert "'a' could not be unloaded (ConnectionError: the server is gone)" in caplog.text
    assert "'b' could not be unloaded" in caplog.text

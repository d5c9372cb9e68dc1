"""AsyncTokenCharacterTrie: batching of concurrent requests, failures, cleanup, backends."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from genlm_core.errors import BackendUnavailableError, UnknownBackendError
from genlm_core.tokenization import Token
from genlm_core.trie import (
    AsyncCharacterTrie,
    AsyncTokenCharacterTrie,
    CharacterTrie,
    InvalidWeightsError,
    ParallelTokenCharacterTrie,
    ReferenceTokenCharacterTrie,
    TokenCharacterTrie,
)

VOCAB = [Token(i, w) for i, w in enumerate([b"a", b"ab", b"abc", b"b", b"", b"ba"])]


class RecordingTrie(TokenCharacterTrie):
    """A real trie that also records the size of every batch call."""

    def __init__(self, decode):
        super().__init__(decode)
        self.calls: list[tuple[str, int]] = []

    def batch_weight_sum(self, ws):
        self.calls.append(("sum", len(ws)))
        return super().batch_weight_sum(ws)

    def batch_weight_max(self, ws):
        self.calls.append(("max", len(ws)))
        return super().batch_weight_max(ws)


class FailsOnceTrie(RecordingTrie):
    """Raises on its first batch call, then works."""

    def batch_weight_sum(self, ws):
        if not self.calls:
            self.calls.append(("fail", len(ws)))
            raise RuntimeError("device lost")
        return super().batch_weight_sum(ws)


def _weights(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return list(rng.dirichlet(np.ones(len(VOCAB)), size=n))


def test_protocols_are_satisfied():
    trie = TokenCharacterTrie(VOCAB)
    assert isinstance(trie, CharacterTrie)
    assert isinstance(AsyncTokenCharacterTrie(trie), AsyncCharacterTrie)


async def test_concurrent_requests_are_batched_and_correct():
    trie = RecordingTrie(VOCAB)
    async_trie = AsyncTokenCharacterTrie(trie)
    ws = _weights(10)
    sums = await asyncio.gather(*(async_trie.weight_sum(w) for w in ws))
    assert trie.calls == [("sum", 10)]
    for w, s in zip(ws, sums, strict=True):
        np.testing.assert_array_equal(s, trie.weight_sum(w))
    await async_trie.cleanup()


async def test_sum_and_max_in_one_batch_are_split_by_operation():
    trie = RecordingTrie(VOCAB)
    async_trie = AsyncTokenCharacterTrie(trie)
    ws = _weights(6, seed=1)
    results = await asyncio.gather(
        *(
            async_trie.weight_sum(w) if i % 2 else async_trie.weight_max(np.log(w))
            for i, w in enumerate(ws)
        )
    )
    assert sorted(trie.calls) == [("max", 3), ("sum", 3)]
    for i, (w, r) in enumerate(zip(ws, results, strict=True)):
        expected = trie.weight_sum(w) if i % 2 else trie.weight_max(np.log(w))
        np.testing.assert_array_equal(r, expected)
    await async_trie.cleanup()


async def test_max_batch_size_splits_batches():
    trie = RecordingTrie(VOCAB)
    async_trie = AsyncTokenCharacterTrie(trie, max_batch_size=4)
    await asyncio.gather(*(async_trie.weight_sum(w) for w in _weights(10)))
    assert [n for _, n in trie.calls] == [4, 4, 2]
    await async_trie.cleanup()


async def test_batch_error_reaches_every_caller_and_next_batch_works():
    trie = FailsOnceTrie(VOCAB)
    async_trie = AsyncTokenCharacterTrie(trie)
    ws = _weights(5)
    results = await asyncio.gather(*(async_trie.weight_sum(w) for w in ws), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) and str(r) == "device lost" for r in results)
    again = await asyncio.gather(*(async_trie.weight_sum(w) for w in ws))
    for w, s in zip(ws, again, strict=True):
        np.testing.assert_array_equal(s, trie.weight_sum(w))
    assert trie.calls[0] == ("fail", 5)
    await async_trie.cleanup()


async def test_bad_input_fails_only_its_caller():
    async_trie = AsyncTokenCharacterTrie(TokenCharacterTrie(VOCAB))
    ws = _weights(4)
    nan = ws[2].copy()
    nan[3] = np.nan
    results = await asyncio.gather(
        async_trie.weight_sum(ws[0]),
        async_trie.weight_sum(ws[1]),
        async_trie.weight_sum(nan),
        async_trie.weight_sum(np.ones(3)),
        return_exceptions=True,
    )
    np.testing.assert_array_equal(results[0], async_trie.trie.weight_sum(ws[0]))
    np.testing.assert_array_equal(results[1], async_trie.trie.weight_sum(ws[1]))
    assert isinstance(results[2], InvalidWeightsError) and "NaN" in str(results[2])
    assert isinstance(results[3], InvalidWeightsError) and "got shape (3,)" in str(results[3])
    with pytest.raises(InvalidWeightsError, match="NaN"):
        await async_trie.weight_max(nan)  # alone in its batch
    await async_trie.cleanup()


async def test_cleanup_is_idempotent_and_a_later_request_restarts():
    async_trie = AsyncTokenCharacterTrie(TokenCharacterTrie(VOCAB))
    w = _weights(1)[0]
    first = await async_trie.weight_sum(w)
    await async_trie.cleanup()
    await async_trie.cleanup()
    np.testing.assert_array_equal(await async_trie.weight_sum(w), first)
    async_trie.shutdown()
    async_trie.shutdown()
    np.testing.assert_array_equal(await async_trie.weight_max(w), async_trie.trie.weight_max(w))
    await async_trie.cleanup()


def test_works_across_event_loops():
    async_trie = AsyncTokenCharacterTrie(TokenCharacterTrie(VOCAB))
    w = _weights(1)[0]
    first = asyncio.run(async_trie.weight_sum(w))
    second = asyncio.run(async_trie.weight_sum(w))
    np.testing.assert_array_equal(first, second)
    asyncio.run(async_trie.cleanup())


def test_from_vocab_picks_the_best_available_implementation():
    assert type(AsyncTokenCharacterTrie.from_vocab(VOCAB).trie) is TokenCharacterTrie


@pytest.mark.parametrize(
    ("backend", "cls"),
    [
        ("numba", TokenCharacterTrie),
        ("reference", ReferenceTokenCharacterTrie),
        ("sequential", TokenCharacterTrie),
        ("parallel", ParallelTokenCharacterTrie),
    ],
)
async def test_from_vocab_by_name(backend, cls):
    async_trie = AsyncTokenCharacterTrie.from_vocab(VOCAB, backend=backend)
    assert type(async_trie.trie) is cls
    w = _weights(1)[0]
    np.testing.assert_allclose(
        await async_trie.weight_sum(w), TokenCharacterTrie(VOCAB).weight_sum(w), rtol=1e-6
    )
    await async_trie.cleanup()


def test_from_vocab_passes_constructor_arguments():
    assert (
        AsyncTokenCharacterTrie.from_vocab(VOCAB, backend="parallel", device="cpu").trie.device
        == "cpu"
    )


def test_from_vocab_unknown_backend_lists_installed():
    with pytest.raises(UnknownBackendError, match=r"unknown trie 'nope'. Installed: .*numba"):
        AsyncTokenCharacterTrie.from_vocab(VOCAB, backend="nope")


def test_from_vocab_torch_cuda_without_gpu_says_why():
    from genlm_core.plugins import has_nvidia_gpu

    if has_nvidia_gpu():
        pytest.skip("this machine has an NVIDIA GPU")
    with pytest.raises(BackendUnavailableError, match="requires an NVIDIA GPU"):
        AsyncTokenCharacterTrie.from_vocab(VOCAB, backend="torch-cuda")


def test_start_is_genlm_backends_and_needs_a_running_loop():
    trie = AsyncTokenCharacterTrie(TokenCharacterTrie([Token(0, b"a"), Token(1, b"b")]))
    with pytest.raises(RuntimeError, match=r"start\(\) must be called from async code"):
        trie.start()

    async def use():
        trie.start()
        trie.start()  # again: nothing new
        masses = await trie.weight_sum(np.array([0.25, 0.75]))
        await trie.cleanup()
        trie.start()  # after cleanup: batching afresh
        again = await trie.weight_sum(np.array([0.25, 0.75]))
        await trie.cleanup()
        return masses, again

    masses, again = asyncio.run(use())
    np.testing.assert_array_equal(masses, again)
    assert masses[trie.trie.root] == 1.0

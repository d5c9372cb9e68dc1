"""genlm-backend 0.3.1 ``tests/test_trie.py``, ported: ``genlm.backend`` -> ``genlm_core``.

Differences (docs/migrating.md): the tokenizer is the ``gpt2-npm`` asset; three tests
reached private members (``_task``, ``_queue_request``, ``_preprocess_ws``) and here
check the same behaviour through the public methods, as noted on each.
"""

import asyncio

import numpy as np
import pytest
import torch

from genlm_core.llm import MockAsyncLM
from genlm_core.tokenization import Token
from genlm_core.trie import (
    AsyncTokenCharacterTrie,
    ParallelTokenCharacterTrie,
    TokenCharacterTrie,
)

CUDA = pytest.mark.cuda  # skipped, with the reason, without an NVIDIA GPU


@pytest.fixture()
def decode():
    return [Token(0, b"a"), Token(1, b"b"), Token(2, b"ab"), Token(3, b"<eos>")]


@pytest.fixture(scope="module")
def mock_llm(load_tokenizer):
    return MockAsyncLM(load_tokenizer("openai-community/gpt2"))


def test_sequential_weight_sum(decode):
    trie = TokenCharacterTrie(decode=decode)
    haves = trie.weight_sum(torch.tensor([0.1, 0.2, 0.2, 0.5]))

    leaf_wants = {
        b"a": 0.1,
        b"b": 0.2,
        b"ab": 0.2,
        b"<eos>": 0.5,
    }
    internal_wants = {
        b"": 1,
        b"a": 0.3,
        b"b": 0.2,
        b"ab": 0.2,
        b"<": 0.5,
        b"<e": 0.5,
        b"<eo": 0.5,
        b"<eos": 0.5,
        b"<eos>": 0.5,
    }

    for node, prefix in trie.node2prefix.items():
        have = haves[node]
        if node in trie.leaf2word:
            want = leaf_wants[bytes(prefix)]
        else:
            want = internal_wants[bytes(prefix)]
        assert np.isclose(have, want, rtol=1e-5, atol=1e-8), [have, want, prefix]


def test_sequential_weight_max(decode):
    trie = TokenCharacterTrie(decode=decode)
    haves = trie.weight_max(torch.tensor([0.1, 0.2, 0.2, 0.5]))

    leaf_wants = {
        b"a": 0.1,
        b"b": 0.2,
        b"ab": 0.2,
        b"<eos>": 0.5,
    }
    internal_wants = {
        b"": 0.5,  # max of all nodes
        b"a": 0.2,  # max of "a" and "ab"
        b"b": 0.2,  # just "b"
        b"ab": 0.2,  # just "ab"
        b"<": 0.5,  # just "<eos>"
        b"<e": 0.5,  # just "<eos>"
        b"<eo": 0.5,  # just "<eos>"
        b"<eos": 0.5,  # just "<eos>"
        b"<eos>": 0.5,  # just "<eos>"
    }

    for node, prefix in trie.node2prefix.items():
        have = haves[node]
        if node in trie.leaf2word:
            want = leaf_wants[bytes(prefix)]
        else:
            want = internal_wants[bytes(prefix)]
        assert np.isclose(have, want, rtol=1e-5, atol=1e-8), [have, want, prefix]


@pytest.mark.parametrize(
    "device",
    [
        pytest.param("cpu"),
        pytest.param("cuda", marks=CUDA),
    ],
)
def test_single_agreement(decode, device):
    trie = TokenCharacterTrie(decode=decode)
    ws = torch.tensor([0.1, 0.2, 0.2, 0.5]).to(device)
    parallel_trie = ParallelTokenCharacterTrie(decode=decode, device=device)

    parallel_weights = parallel_trie.weight_sum(ws)
    sequential_weights = trie.weight_sum(ws)

    assert np.allclose(parallel_weights, sequential_weights, rtol=1e-5, atol=1e-8)

    parallel_weights = parallel_trie.weight_max(ws)
    sequential_weights = trie.weight_max(ws)

    assert np.allclose(parallel_weights, sequential_weights, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize(
    "device",
    [
        pytest.param("cpu"),
        pytest.param("cuda", marks=CUDA),
    ],
)
def test_batch_agreement(decode, device):
    sequential_trie = TokenCharacterTrie(decode=decode)
    parallel_trie = ParallelTokenCharacterTrie(decode=decode, device=device)

    ws = torch.stack(
        [
            torch.tensor([0.1, 0.2, 0.2, 0.5]),
            torch.tensor([0, 0.3, 0.6, 0.1]),
            torch.tensor([0.99, 0.01, 0, 0]),
        ]
    ).to(device)

    parallel_weights = parallel_trie.batch_weight_sum(ws)
    sequential_weights = sequential_trie.batch_weight_sum(ws)

    assert len(parallel_weights) == len(sequential_weights)

    for have, want in zip(sequential_weights, parallel_weights, strict=True):
        np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-8)

    parallel_weights = parallel_trie.batch_weight_max(ws)
    sequential_weights = sequential_trie.batch_weight_max(ws)

    assert len(parallel_weights) == len(sequential_weights)

    for have, want in zip(sequential_weights, parallel_weights, strict=True):
        np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("backend", ["sequential", "parallel"])
@pytest.mark.asyncio
async def test_async_trie(mock_llm, backend):
    async_trie = AsyncTokenCharacterTrie.from_vocab(mock_llm.byte_vocab, backend=backend)
    all_token_ids = [[0, 1, 3], [10, 20, 30], [8, 100]]
    all_weights = torch.exp(await mock_llm.batch_next_token_logprobs(all_token_ids))

    haves = await asyncio.gather(*[async_trie.weight_sum(ws) for ws in all_weights])
    wants = async_trie.trie.batch_weight_sum(all_weights)

    assert len(haves) == len(wants)

    for have, want in zip(haves, wants, strict=True):
        np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-8)

    haves = await asyncio.gather(*[async_trie.weight_max(ws) for ws in all_weights])
    wants = async_trie.trie.batch_weight_max(all_weights)

    assert len(haves) == len(wants)

    for have, want in zip(haves, wants, strict=True):
        np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-8)


@pytest.mark.asyncio
@pytest.mark.parametrize("backend", ["sequential", "parallel"])
async def test_async_trie_cleanup(mock_llm, backend):
    async_trie = AsyncTokenCharacterTrie.from_vocab(mock_llm.byte_vocab, backend=backend)
    async_trie.start()
    await async_trie.cleanup()
    # genlm-backend checked its private ``_task is None``; here: cleanup is idempotent,
    # and a request after it starts batching afresh, like genlm-backend's did.
    await async_trie.cleanup()
    ws = torch.exp(await mock_llm.next_token_logprobs([0, 1, 3]))
    np.testing.assert_allclose(
        await async_trie.weight_sum(ws), async_trie.trie.weight_sum(ws), rtol=1e-5
    )
    await async_trie.cleanup()


def test_async_invalid_backend():
    with pytest.raises(ValueError):
        AsyncTokenCharacterTrie.from_vocab(["a", "b", "c"], backend="invalid")


@pytest.mark.asyncio
async def test_async_error_handling(decode):
    async_trie = AsyncTokenCharacterTrie.from_vocab(decode, backend="parallel")
    async_trie.start()
    # genlm-backend queued an unknown operation through its private ``_queue_request``;
    # here the batch's error is bad weights (wrong length): a ValueError for the caller.
    with pytest.raises(ValueError):
        await async_trie.weight_sum(torch.tensor([0.1, 0.2]))
    await async_trie.cleanup()


def test_sequential_preprocessing(decode):
    """genlm-backend called its private ``_preprocess_ws``; here the public methods
    take the same inputs (torch tensors, on CUDA too) and give NumPy arrays."""
    trie = TokenCharacterTrie(decode=decode)

    ws = torch.zeros(len(decode))
    processed = trie.weight_sum(ws)
    assert isinstance(processed, np.ndarray)

    ws = torch.tensor([0.1] * len(decode))
    processed = trie.weight_sum(ws)
    assert isinstance(processed, np.ndarray)

    if torch.cuda.is_available():
        ws = torch.tensor([0.1] * len(decode), device="cuda")
        processed = trie.weight_sum(ws)
        assert isinstance(processed, np.ndarray)


@pytest.mark.parametrize(
    "device",
    [
        pytest.param("cpu"),
        pytest.param("cuda", marks=CUDA),
    ],
)
def test_parallel_preprocessing(decode, device):
    """genlm-backend called its private ``_preprocess_ws`` (weights to a float32 tensor
    on the trie's device); here the public batch methods take the same inputs, and
    the result is float32 and equal to the sequential trie's."""
    parallel_trie = ParallelTokenCharacterTrie(decode=decode, device=device)
    want = TokenCharacterTrie(decode=decode).batch_weight_sum(
        np.array([[0.5, 0.5, 0.5, 0.5], [0.1, 0.5, 0.5, 0.5]])
    )

    # numpy array input
    np_weights = np.array([[0.5, 0.5, 0.5, 0.5], [0.1, 0.5, 0.5, 0.5]])
    processed = parallel_trie.batch_weight_sum(np_weights)
    assert processed.dtype == np.float32
    np.testing.assert_allclose(processed, want, rtol=1e-6)

    # list input
    list_weights = [[0.5, 0.5, 0.5, 0.5], [0.1, 0.5, 0.5, 0.5]]
    processed = parallel_trie.batch_weight_sum(list_weights)
    assert processed.dtype == np.float32
    np.testing.assert_allclose(processed, want, rtol=1e-6)

    # tensor on the other device
    if torch.cuda.is_available():
        wrong_device = "cuda" if parallel_trie.device == "cpu" else "cpu"
        tensor_weights = torch.tensor(
            [[0.5, 0.5, 0.5, 0.5], [0.1, 0.5, 0.5, 0.5]], device=wrong_device
        )
        processed = parallel_trie.batch_weight_sum(tensor_weights)
        assert processed.dtype == np.float32
        np.testing.assert_allclose(processed, want, rtol=1e-6)


def test_visualize(decode):
    trie = TokenCharacterTrie(decode=decode)

    trie.visualize()

    ws = torch.tensor([0.1] * len(trie.children))
    trie.visualize(ws)

    ws = torch.tensor([0] * len(trie.children))
    trie.visualize(ws)

    with pytest.raises(ValueError):
        trie.visualize(torch.tensor([0.1] * (len(trie.children) + 1)))


def test_parallel_invalid_device():
    vocab = [Token(0, b"a"), Token(1, b"b"), Token(2, b"c")]
    with pytest.raises(ValueError):
        ParallelTokenCharacterTrie(decode=vocab, device="invalid")


def test_trie_with_non_token_iterables():
    """Test that the trie works with non-Token iterables like bytes but warns."""
    decode = [
        Token(0, b"hello"),
        b"world",  # Plain bytes object
        Token(2, b"test"),
        b"data",  # Another plain bytes object
    ]

    with pytest.warns(
        DeprecationWarning,
        match="Passing plain bytes to TokenCharacterTrie is deprecated",
    ):
        trie = TokenCharacterTrie(decode=decode)
    assert (b"hello", 0) in trie.word2leaf
    assert b"world" in trie.word2leaf
    assert (b"test", 2) in trie.word2leaf
    assert b"data" in trie.word2leaf
    ws = torch.tensor([0.25, 0.25, 0.25, 0.25])
    result = trie.weight_sum(ws)
    assert len(result) == len(trie.children)


def test_trie_duplicate_word_error():
    """Test that duplicate words in vocabulary raise ValueError."""
    decode_bytes = [b"hello", b"world", b"hello"]
    with pytest.warns(DeprecationWarning):
        with pytest.raises(ValueError, match="Duplicate word in vocabulary"):
            TokenCharacterTrie(decode=decode_bytes)
    decode_tokens = [
        Token(0, b"test"),
        Token(1, b"other"),
        Token(0, b"test"),
    ]
    with pytest.raises(ValueError, match="Duplicate word in vocabulary"):
        TokenCharacterTrie(decode=decode_tokens)

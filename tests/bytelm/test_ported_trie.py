"""Ported from genlm-bytes 0.2.0 tests/test_trie.py (Apache-2.0); imports renamed.

The hub tokenizer "gpt2" is the project's gpt2-npm asset; tests of private helpers are
rewritten against ours (noted where they are; listed in docs/migrating.md).
"""

import asyncio

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from transformers import AutoTokenizer

from genlm_bytelm import AsyncTokenByteTrie, TokenByteTrie
from genlm_bytelm.byte_lm.trie_state import TrieMode
from genlm_core.testing import MockAsyncLM
from genlm_core.testing.assets import tokenizer_dir
from genlm_core.tokenization import Token


@pytest.fixture()
def decode():
    return [
        Token(token_id=0, byte_string=b"a"),
        Token(token_id=1, byte_string=b"b"),
        Token(token_id=2, byte_string=b"ab"),
        Token(token_id=3, byte_string=b"<eos>"),
    ]


@pytest.fixture(scope="module")
def mock_llm():
    return MockAsyncLM(AutoTokenizer.from_pretrained(tokenizer_dir("gpt2-npm")))  # hub "gpt2"


@st.composite
def tokens_and_weights(draw, n_weights):
    byte_vocab = draw(
        st.lists(st.binary(min_size=1, max_size=5), min_size=1, max_size=10, unique=True)
    )

    # Ensure we have at least two tokens with a shared prefix.
    for token in byte_vocab:
        if len(token) > 1:
            new_token = token[:-1]
            if new_token not in byte_vocab:
                byte_vocab.append(new_token)
                break

    # Convert to Token objects
    vocab = [Token(token_id=i, byte_string=b) for i, b in enumerate(byte_vocab)]

    weights = []
    for _ in range(n_weights):
        weights.append(
            draw(
                st.lists(
                    st.floats(min_value=0.0, max_value=10.0),
                    min_size=len(vocab),
                    max_size=len(vocab),
                )
            )
        )

    return vocab, weights


def make_wants(trie, weights, op, f):
    assert len(weights) == len(trie.decode)

    leaf_wants = {}
    for token, weight in zip(trie.decode, weights):
        # Token objects: use (byte_string, token_id) as key for word2leaf
        token_bytes = token.byte_string
        token_id = token.token_id
        word2leaf_key = (token_bytes, token_id)
        assert word2leaf_key in trie.word2leaf, f"Key {word2leaf_key} not in word2leaf"
        leaf_wants[word2leaf_key] = weight

    internal_wants = {}
    for token, weight in zip(trie.decode, weights):
        token_bytes = token.byte_string
        for i in range(len(token_bytes) + 1):
            prefix = token_bytes[:i]
            if prefix not in internal_wants:
                internal_wants[f(prefix)] = weight
            else:
                internal_wants[f(prefix)] = op(internal_wants[f(prefix)], weight)

    return leaf_wants, internal_wants


def assert_weights_close(trie, leaf_wants, internal_wants, haves, f):
    assert len(haves) == len(trie.children)

    haves = haves.cpu().numpy()

    for node, prefix in trie.node2prefix.items():
        if node in trie.leaf2word:
            continue
        have = haves[node]
        if prefix == [257]:  # EOS node
            continue
        want = internal_wants[f(prefix)]
        assert np.isclose(have, want, rtol=1e-5, atol=1e-8), [have, want, prefix]

    for token in trie.decode:
        # Token objects: use (byte_string, token_id) as key for word2leaf
        token_bytes = token.byte_string
        token_id = token.token_id
        word2leaf_key = (token_bytes, token_id)
        assert word2leaf_key in trie.word2leaf
        node = trie.word2leaf[word2leaf_key]
        have = haves[node]
        want = leaf_wants[word2leaf_key]
        assert np.isclose(have, want, rtol=1e-5, atol=1e-8), [have, want, token_bytes]


def test_weight_sum_single(decode):
    trie = TokenByteTrie(decode=decode)
    haves = trie.weight_sum(torch.tensor([0.1, 0.2, 0.2, 0.5]))

    # leaf_wants now uses (bytes, token_id) keys
    leaf_wants = {
        (b"a", 0): 0.1,
        (b"b", 1): 0.2,
        (b"ab", 2): 0.2,
        (b"<eos>", 3): 0.5,
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

    assert_weights_close(trie, leaf_wants, internal_wants, haves, bytes)


def test_weight_sum_single_atomic(decode):
    trie = TokenByteTrie(decode=decode, atomic_byte_strings=[b"ab"])
    haves = trie.weight_sum(torch.tensor([0.1, 0.2, 0.2, 0.5]))

    # leaf_wants now uses (bytes, token_id) keys
    leaf_wants = {
        (b"a", 0): 0.1,
        (b"b", 1): 0.2,
        (b"ab", 2): 0.2,
        (b"<eos>", 3): 0.5,
    }
    internal_wants = {
        b"": 1,
        b"a": 0.1,
        b"b": 0.2,
        b"ab": 0.2,
        b"<": 0.5,
        b"<e": 0.5,
        b"<eo": 0.5,
        b"<eos": 0.5,
        b"<eos>": 0.5,
    }

    assert_weights_close(trie, leaf_wants, internal_wants, haves, bytes)


@given(tokens_and_weights(n_weights=1))
def test_weight_sum(tokens_and_weights):
    vocab, weights = tokens_and_weights
    trie = TokenByteTrie(decode=vocab)
    haves = trie.weight_sum(weights[0])
    leaf_wants, internal_wants = make_wants(trie, weights[0], np.add, bytes)
    assert_weights_close(trie, leaf_wants, internal_wants, haves, bytes)


@given(tokens_and_weights(n_weights=1))
def test_weight_max(tokens_and_weights):
    vocab, weights = tokens_and_weights
    trie = TokenByteTrie(decode=vocab)
    haves = trie.weight_max(weights[0])
    leaf_wants, internal_wants = make_wants(trie, weights[0], np.maximum, bytes)
    assert_weights_close(trie, leaf_wants, internal_wants, haves, bytes)


@given(tokens_and_weights(n_weights=3))
def test_batch_weight_sum(tokens_and_weights):
    vocab, weights = tokens_and_weights
    trie = TokenByteTrie(decode=vocab)
    haves = trie.batch_weight_sum(weights)
    for i in range(len(weights)):
        leaf_wants, internal_wants = make_wants(trie, weights[i], np.add, bytes)
        assert_weights_close(trie, leaf_wants, internal_wants, haves[i], bytes)


@given(tokens_and_weights(n_weights=3))
def test_batch_weight_max(tokens_and_weights):
    vocab, weights = tokens_and_weights
    trie = TokenByteTrie(decode=vocab)
    haves = trie.batch_weight_max(weights)
    for i in range(len(weights)):
        leaf_wants, internal_wants = make_wants(trie, weights[i], np.maximum, bytes)
        assert_weights_close(trie, leaf_wants, internal_wants, haves[i], bytes)


@pytest.mark.asyncio
async def test_async_trie(mock_llm):
    async_trie = AsyncTokenByteTrie.from_vocab(mock_llm.byte_vocab)
    all_token_ids = [[0, 1, 3], [10, 20, 30], [8, 100]]
    all_weights = torch.exp(await mock_llm.batch_next_token_logprobs(all_token_ids))

    haves = await asyncio.gather(*[async_trie.weight_sum(ws) for ws in all_weights])
    haves = [h.cpu().numpy() for h in haves]
    wants = async_trie.trie.batch_weight_sum(all_weights).cpu().numpy()

    assert len(haves) == len(wants)
    for have, want in zip(haves, wants):
        np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-8)

    haves = await asyncio.gather(*[async_trie.weight_max(ws) for ws in all_weights])
    haves = [h.cpu().numpy() for h in haves]
    wants = async_trie.trie.batch_weight_max(all_weights).cpu().numpy()

    assert len(haves) == len(wants)
    for have, want in zip(haves, wants):
        np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-8)


# Rewritten: genlm-bytes checks its private background task (_task) and queue
# (_queue_request); ours batches through an AutoBatcher. Same behaviour, public API.
@pytest.mark.asyncio
async def test_async_trie_cleanup(mock_llm):
    async_trie = AsyncTokenByteTrie.from_vocab(mock_llm.byte_vocab)
    ws = torch.exp(await mock_llm.next_token_logprobs([0, 1]))
    first = await async_trie.weight_sum(ws)
    await async_trie.cleanup()
    await async_trie.cleanup()  # idempotent
    assert torch.equal(await async_trie.weight_sum(ws), first)  # a later request restarts it


@pytest.mark.asyncio
async def test_async_error_handling(decode):
    async_trie = AsyncTokenByteTrie.from_vocab(decode)
    with pytest.raises(ValueError):
        await async_trie._submit(
            ("invalid-op", TrieMode.WITHOUT_EOS), torch.tensor([0.1, 0.2, 0.2, 0.5])
        )
    with pytest.raises(ValueError):  # a bad request fails alone
        await async_trie.weight_sum(torch.tensor([0.1, 0.2]))
    assert (await async_trie.weight_sum(torch.tensor([0.1, 0.2, 0.2, 0.5])))[
        async_trie.trie.root
    ] == pytest.approx(1.0)


@pytest.mark.parametrize(
    "device",
    [
        pytest.param("cpu"),
        pytest.param(
            "cuda",
            marks=pytest.mark.cuda,
        ),
    ],
)
def test_preprocessing(decode, device):
    # Rewritten: genlm-bytes tests its private _preprocess_ws; ours converts inside
    # batch_weight_sum. Same inputs accepted, float32 results on the trie's device.
    trie = TokenByteTrie(decode=decode, device=device)
    want = torch.tensor([[0.5, 0.5, 0.5, 0.5], [0.1, 0.5, 0.5, 0.5]])

    for weights in (want.numpy(), want.tolist(), want.double()):
        processed = trie.batch_weight_sum(weights)
        assert isinstance(processed, torch.Tensor)
        assert processed.device.type == trie.device
        assert processed.dtype == torch.float32
        assert torch.allclose(processed.cpu(), trie.batch_weight_sum(want).cpu())

    if torch.cuda.is_available():
        wrong_device = "cuda" if trie.device == "cpu" else "cpu"
        processed = trie.batch_weight_sum(want.to(wrong_device))
        assert processed.device.type == trie.device
        assert processed.dtype == torch.float32


def test_visualize(decode):
    trie = TokenByteTrie(decode=decode)

    trie.visualize()

    ws = torch.tensor([0.1] * len(trie.children))
    trie.visualize(ws)

    ws = torch.tensor([0] * len(trie.children))
    trie.visualize(ws)

    with pytest.raises(ValueError):
        trie.visualize(torch.tensor([0.1] * (len(trie.children) + 1)))

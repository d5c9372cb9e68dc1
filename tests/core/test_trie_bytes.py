"""TokenByteTrie / AsyncTokenByteTrie against genlm-bytes 0.2.0 and the definition."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch
from genlm.backend.tokenization import Token as BackendToken
from genlm.bytes.trie import TokenByteTrie as TheirByteTrie
from genlm.bytes.trie import TrieMode as TheirMode
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from genlm_core.tokenization import Token
from genlm_core.trie import (
    AsyncTokenByteTrie,
    InvalidVocabularyError,
    InvalidWeightsError,
    TokenByteTrie,
    TrieMode,
    VocabularyTypeError,
)
from genlm_trie_numba.byte_trie import EOS

pytestmark = pytest.mark.filterwarnings("ignore:Sparse:UserWarning")  # inside genlm-bytes


def _same_as_genlm_bytes(words: list[bytes], ws: torch.Tensor, **kwargs) -> None:
    vocab = [BackendToken(i, w) for i, w in enumerate(words)]
    ours, theirs = TokenByteTrie(vocab, **kwargs), TheirByteTrie(vocab, device="cpu", **kwargs)
    assert (ours.root, ours.eos_node, ours.num_nodes) == (
        theirs.root,
        theirs.eos_node,
        len(theirs.children),
    )
    for node in range(ours.num_nodes):
        assert list(ours.children[node].items()) == list(theirs.children[node].items())
        assert ours.node2prefix[node] == theirs.node2prefix[node]
    assert ours.word2leaf == theirs.word2leaf and ours.leaf2word == theirs.leaf2word
    np.testing.assert_array_equal(ours.token_id_to_leaf, theirs.token_id_to_leaf)
    assert ours.eos_token_ids == sorted(theirs.eos_token_ids)
    for mode in (None, TrieMode.WITHOUT_EOS, TrieMode.WITH_EOS):
        their_mode = None if mode is None else TheirMode(mode.value)
        mine, ref = ours.batch_weight_sum(ws, mode), theirs.batch_weight_sum(ws, mode=their_mode)
        assert mine.dtype == ref.dtype == torch.float32 and mine.shape == ref.shape
        torch.testing.assert_close(mine, ref, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(ours.weight_sum(ws[0], mode), mine[0])
    mine, ref = ours.batch_weight_max(ws), theirs.batch_weight_max(ws)
    assert torch.all(mine[:, ours.eos_node] == -torch.inf)  # genlm-bytes 0.2.0 says 0 here
    mine[:, ours.eos_node] = 0
    torch.testing.assert_close(mine, ref, rtol=0, atol=0)


@settings(derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    words=st.lists(
        st.lists(st.sampled_from(b"ab<>"), max_size=5).map(bytes), min_size=1, max_size=20
    ),
    data=st.data(),
)
def test_matches_genlm_bytes_on_random_vocabularies(words, data):
    eos = data.draw(st.sets(st.sampled_from(words), max_size=2))
    atomic = data.draw(st.lists(st.sampled_from(words), max_size=2, unique=True))
    ws = torch.tensor(
        data.draw(
            st.lists(
                st.lists(st.floats(0, 1), min_size=len(words), max_size=len(words)),
                min_size=1,
                max_size=3,
            )
        ),
        dtype=torch.float32,
    )
    _same_as_genlm_bytes(
        words, ws, eos_byte_strings=eos, atomic_byte_strings=atomic, eot_sentinel=b""
    )


def test_with_eos_mode_moves_eos_mass_to_the_eos_node():
    vocab = [Token(0, b"a"), Token(1, b"ab"), Token(2, b"</s>"), Token(3, b"b")]
    trie = TokenByteTrie(vocab, eos_byte_strings={b"</s>"}, atomic_byte_strings=[b"</s>"])
    ws = torch.tensor([0.1, 0.2, 0.3, 0.4])
    with_eos = trie.weight_sum(ws, TrieMode.WITH_EOS)
    without = trie.weight_sum(ws, TrieMode.WITHOUT_EOS)
    eos_leaf = trie.word2leaf[(b"</s>", 2)]
    assert trie.children[trie.root][EOS] == trie.eos_node
    assert trie.children[trie.root][b"</s>"] != trie.eos_node  # the atomic edge
    assert with_eos[trie.eos_node] == pytest.approx(0.3) and with_eos[eos_leaf] == 0
    assert without[trie.eos_node] == 0 and without[eos_leaf] == pytest.approx(0.3)
    assert with_eos[trie.root] == pytest.approx(1.0) == without[trie.root]
    assert trie.node2prefix[eos_leaf] == list(b"</s>")


def test_weights_are_indexed_by_token_id():
    vocab = [Token(1, b"b"), Token(0, b"a")]
    trie = TokenByteTrie(vocab)
    masses = trie.weight_sum(torch.tensor([0.25, 0.75]))  # id 0 = b"a"
    assert masses[trie.children[trie.root][ord("a")]] == 0.25
    assert masses[trie.children[trie.root][ord("b")]] == 0.75
    assert trie.leaf2token_id[trie.word2leaf[(b"a", 0)]] == 0


def test_log_space_max_is_exact():
    vocab = [Token(0, b"ab"), Token(1, b"ac")]
    trie = TokenByteTrie(vocab)
    masses = trie.weight_max(torch.log(torch.tensor([0.5, 0.25])))
    assert masses[trie.root] == torch.log(torch.tensor(0.5))


def test_bad_vocabularies():
    with pytest.raises(InvalidVocabularyError, match="decode cannot be empty"):
        TokenByteTrie([])
    with pytest.raises(VocabularyTypeError, match="must contain Token objects, got str"):
        TokenByteTrie(["a"])
    with pytest.raises(TypeError):
        TokenByteTrie([Token(0, b"a"), "b"])
    with pytest.raises(InvalidVocabularyError, match=r"token ids must be 0..1, each once"):
        TokenByteTrie([Token(0, b"a"), Token(5, b"b")])
    with pytest.raises(InvalidVocabularyError, match=r"EOS byte string b'</s>' not in vocabulary"):
        TokenByteTrie([Token(0, b"a")], eos_byte_strings={b"</s>"})
    with pytest.raises(InvalidVocabularyError, match=r"Atomic byte string b'ab' not in vocabulary"):
        TokenByteTrie([Token(0, b"abc")], atomic_byte_strings=[b"ab"])


def test_plain_bytes_are_deprecated_and_numbered_by_position():
    with pytest.warns(DeprecationWarning, match="plain bytes"):
        trie = TokenByteTrie([b"a", b"b"])
    assert [t.token_id for t in trie.decode] == [0, 1]


def test_bad_weights():
    trie = TokenByteTrie([Token(0, b"a"), Token(1, b"b")])
    with pytest.raises(InvalidWeightsError, match=r"shape \(2,\).*got shape \(3,\)"):
        trie.weight_sum(torch.ones(3))
    with pytest.raises(InvalidWeightsError, match=r"entry 1 .* is NaN"):
        trie.weight_sum(torch.tensor([0.5, float("nan")]))


async def test_async_byte_trie_batches_per_operation_and_mode():
    vocab = [Token(0, b"a"), Token(1, b"<eos>"), Token(2, b"ab")]
    trie = TokenByteTrie(vocab, eos_byte_strings={b"<eos>"})
    calls = []
    batch_sum, batch_max = trie.batch_weight_sum, trie.batch_weight_max

    def recording_sum(ws, mode=None):
        calls.append(("sum", mode, len(ws)))
        return batch_sum(ws, mode)

    def recording_max(ws):
        calls.append(("max", None, len(ws)))
        return batch_max(ws)

    trie.batch_weight_sum, trie.batch_weight_max = recording_sum, recording_max
    async_trie = AsyncTokenByteTrie(trie)
    ws = [torch.tensor([0.2, 0.5, 0.3]) * (i + 1) for i in range(4)]
    results = await asyncio.gather(
        async_trie.weight_sum(ws[0]),
        async_trie.weight_sum(ws[1], TrieMode.WITH_EOS),
        async_trie.weight_sum(ws[2], TrieMode.WITH_EOS),
        async_trie.weight_max(ws[3]),
    )
    assert sorted(calls, key=str) == sorted(
        [("sum", TrieMode.WITHOUT_EOS, 1), ("sum", TrieMode.WITH_EOS, 2), ("max", None, 1)], key=str
    )
    torch.testing.assert_close(results[0], batch_sum([ws[0]])[0])
    torch.testing.assert_close(results[1], batch_sum([ws[1]], TrieMode.WITH_EOS)[0])
    torch.testing.assert_close(results[3], batch_max([ws[3]])[0])
    await async_trie.cleanup()


async def test_async_byte_trie_from_vocab_passes_options():
    vocab = [Token(0, b"a"), Token(1, b"<eos>")]
    async_trie = AsyncTokenByteTrie.from_vocab(vocab, eos_byte_strings={b"<eos>"})
    assert isinstance(async_trie.trie, TokenByteTrie) and async_trie.trie.eos_token_ids == [1]
    masses = await async_trie.weight_sum(torch.tensor([0.4, 0.6]), TrieMode.WITH_EOS)
    assert masses[async_trie.trie.eos_node] == pytest.approx(0.6)
    await async_trie.cleanup()


async def test_log_weight_sum_is_the_log_of_the_sums_batched_and_owned():
    vocab = [Token(0, b"a"), Token(1, b"<eos>"), Token(2, b"ab"), Token(3, b"b")]
    trie = TokenByteTrie(vocab, eos_byte_strings={b"<eos>"})
    async_trie = AsyncTokenByteTrie(trie)
    logps = [
        torch.log_softmax(torch.randn(4, generator=torch.Generator().manual_seed(i)), 0)
        for i in range(3)
    ]
    modes = [None, TrieMode.WITH_EOS, TrieMode.WITH_EOS]
    logps[0][3] = -float("inf")  # a token of probability 0: its leaf's log-mass is -inf
    outs = await asyncio.gather(
        *(async_trie.log_weight_sum(lp, m) for lp, m in zip(logps, modes, strict=True))
    )
    for lp, mode, out in zip(logps, modes, outs, strict=True):
        want = torch.log(trie.weight_sum(torch.exp(lp).double(), mode)).numpy()
        assert out.dtype == np.float64 and out.base is None  # its own array, not a batch view
        np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
    leaf_b = trie.token_id_to_leaf[3][1]
    assert outs[0][leaf_b] == -np.inf
    bad = torch.tensor([0.0, float("nan"), -1.0, -2.0])
    results = await asyncio.gather(
        async_trie.log_weight_sum(bad), async_trie.log_weight_sum(logps[1]), return_exceptions=True
    )
    assert isinstance(results[0], InvalidWeightsError) and isinstance(results[1], np.ndarray)
    await async_trie.cleanup()

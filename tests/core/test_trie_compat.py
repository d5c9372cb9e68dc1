"""Same results as genlm-backend 0.3.1's tries: node numbering, views, vocabulary types.

Masses on the GPT-2, Llama-3 and Gemma-3 vocabularies: ``test_trie_compat_vocabs.py``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from genlm.backend.tokenization import Token as BackendToken
from genlm.backend.trie import TokenCharacterTrie as BackendTrie

from genlm_core.tokenization import Token
from genlm_core.trie import ReferenceTokenCharacterTrie, TokenCharacterTrie


class EndOfSequence:
    """An EOS marker as genlm-control writes it: iterating yields itself."""

    def __iter__(self):
        yield self

    def __repr__(self) -> str:
        return "EOS"


EOS = EndOfSequence()


@pytest.fixture(scope="module")
def gpt2_vocab(reference_decoded_vocab):
    byte_vocab, _ = reference_decoded_vocab("gpt2-npm")  # genlm-backend's decode_vocab
    return byte_vocab


@pytest.fixture(scope="module")
def gpt2_tries(gpt2_vocab):
    return TokenCharacterTrie(gpt2_vocab), BackendTrie(gpt2_vocab)


def _same_structure(ours, theirs, nodes) -> None:
    assert ours.root == theirs.root
    assert len(ours.children) == len(theirs.children)
    for node in nodes:
        assert ours.children[node] == theirs.children[node]
        assert list(ours.children[node]) == list(theirs.children[node])  # same edge order
        assert ours.node2prefix[node] == theirs.node2prefix[node]
    assert ours.word2leaf == theirs.word2leaf
    assert ours.leaf2word == theirs.leaf2word
    np.testing.assert_array_equal(ours.idx_to_leaf, theirs.idx_to_leaf)


def test_gpt2_structure_is_genlm_backends(gpt2_tries):
    ours, theirs = gpt2_tries
    _same_structure(ours, theirs, range(len(theirs.children)))


def test_gpt2_log_space_max_fixes_genlm_backends_clamp(gpt2_tries, gpt2_vocab):
    ours, theirs = gpt2_tries
    logp = np.log(np.random.default_rng(2).dirichlet(np.ones(len(gpt2_vocab))))
    masses = ours.weight_max(logp)
    assert masses[ours.root] == logp.max() < 0
    assert theirs.weight_max(logp)[theirs.root] == 0.0  # genlm-backend 0.3.1 clamps at 0
    leaves = ours.idx_to_leaf[:, 1]
    np.testing.assert_array_equal(masses[leaves], logp)


def _small_backend_pair(entries):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return (
            TokenCharacterTrie(entries),
            BackendTrie(entries),
            ReferenceTokenCharacterTrie(entries),
        )


@pytest.mark.parametrize(
    "entries",
    [
        [b"hello", b"help", b"he", b"", b"\xff\x00", b"h"],
        ["ab", "a", "b"],
        [b"ab", "ab", (97, 98), EOS],
        [BackendToken(0, b"ab"), BackendToken(1, b"ab"), BackendToken(2, b"a"), EOS],
    ],
    ids=["plain-bytes", "str", "mixed", "backend-tokens-and-eos"],
)
def test_other_vocabulary_types_are_handled_like_genlm_backend(entries):
    ours, theirs, ref = _small_backend_pair(entries)
    _same_structure(ours, theirs, range(len(theirs.children)))
    _same_structure(ref, theirs, range(len(theirs.children)))
    ws = np.linspace(0.1, 0.9, len(entries))
    np.testing.assert_array_equal(ours.weight_sum(ws), theirs.weight_sum(ws))


def test_eos_marker_gets_its_own_edge_and_mass():
    vocab = [Token(0, b"a"), Token(1, b"b"), EOS]
    trie = TokenCharacterTrie(vocab)
    eos_node = trie.children[trie.root][EOS]
    masses = trie.weight_sum(np.array([0.2, 0.3, 0.5]))
    assert masses[eos_node] == 0.5 and masses[trie.root] == 1.0
    assert trie.node2prefix[eos_node] == [EOS]
    assert trie.word2leaf[EOS] == trie.token_leaf[2]


def test_genlm_core_tokens_and_backend_tokens_build_the_same_trie():
    words = [b"ab", b"a", b"ab", b"b"]
    ours = TokenCharacterTrie([Token(i, w) for i, w in enumerate(words)])
    theirs = TokenCharacterTrie([BackendToken(i, w) for i, w in enumerate(words)])
    _same_structure(ours, theirs, range(len(theirs.children)))


def test_plain_bytes_warn_once_pointing_at_the_caller():
    with pytest.warns(DeprecationWarning, match="plain bytes") as record:
        TokenCharacterTrie([b"a", b"b", b"c"])
    assert len(record) == 1
    assert record[0].filename == __file__


def test_views_behave_like_genlm_backends_containers(gpt2_tries):
    ours, theirs = gpt2_tries
    assert ours.children[-1] == theirs.children[-1]
    assert ours.children[:3] == theirs.children[:3]
    assert ours.root in ours.node2prefix and len(ours.node2prefix) == len(theirs.node2prefix)
    with pytest.raises(IndexError):
        ours.children[len(theirs.children)]
    with pytest.raises(KeyError):
        ours.node2prefix[len(theirs.children)]

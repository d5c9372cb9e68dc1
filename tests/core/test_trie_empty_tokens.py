"""Empty tokens (id-range holes, logits padding): a leaf below the root, mass at the root only.

``decode_vocab`` gives ``Token(i, b"")`` for ids a tokenizer does not use (cl100k and
o200k have holes) and for padding up to the model's ``vocab_size``. genlm-backend and
genlm-bytes hang such a token's leaf directly below the root, so its weight counts in
the root's mass (the empty prefix) and in no byte's; the tries here do the same.
"""

from __future__ import annotations

import bisect
import math

import numpy as np
import pytest
import torch
from genlm.backend.tokenization import Token as BackendToken
from genlm.backend.trie import TokenCharacterTrie as BackendTrie
from genlm.bytes.trie import TokenByteTrie as TheirByteTrie
from genlm.bytes.trie import TrieMode as TheirMode

from genlm_core.tokenization import Token, decode_vocab
from genlm_core.trie import (
    ParallelTokenCharacterTrie,
    ReferenceTokenCharacterTrie,
    TokenByteTrie,
    TokenCharacterTrie,
    TrieMode,
)

pytestmark = pytest.mark.filterwarnings("ignore:Sparse:UserWarning")  # inside genlm-bytes

WORDS = [b"a", b"", b"ab", b"", b"b", b"<eos>", b""]  # holes at ids 1, 3 and 6
WS = np.array([0.1, 0.05, 0.2, 0.15, 0.25, 0.2, 0.05])


def test_empty_tokens_are_leaves_below_the_root_as_in_genlm_backend():
    ours = TokenCharacterTrie([Token(i, w) for i, w in enumerate(WORDS)])
    theirs = BackendTrie([BackendToken(i, w) for i, w in enumerate(WORDS)])
    assert ours.num_nodes == len(theirs.children) and ours.root == theirs.root
    for node in range(ours.num_nodes):
        assert list(ours.children[node].items()) == list(theirs.children[node].items())
    for i in (1, 3, 6):
        leaf = ours.word2leaf[(b"", i)]
        assert ours.children[ours.root][(None, i)] == leaf and ours.node2prefix[leaf] == []
    masses = ours.weight_sum(WS)
    np.testing.assert_array_equal(masses, theirs.weight_sum(WS))
    assert masses[ours.root] == pytest.approx(1.0)  # the holes' 0.25 included
    byte_children = [c for edge, c in ours.children[ours.root].items() if isinstance(edge, int)]
    assert math.fsum(masses[byte_children]) == pytest.approx(0.75)  # ... and in no byte's
    np.testing.assert_array_equal(ours.weight_max(WS), theirs.weight_max(WS))
    log_max = ours.weight_max(np.log(WS))
    assert log_max[ours.word2leaf[(b"", 3)]] == np.log(0.15)


def test_empty_tokens_in_the_byte_trie_as_in_genlm_bytes():
    eos = {b"<eos>"}
    ours = TokenByteTrie([Token(i, w) for i, w in enumerate(WORDS)], eos_byte_strings=eos)
    theirs = TheirByteTrie(
        [BackendToken(i, w) for i, w in enumerate(WORDS)], device="cpu", eos_byte_strings=eos
    )
    for node in range(ours.num_nodes):
        assert list(ours.children[node].items()) == list(theirs.children[node].items())
    ws = torch.tensor(WS, dtype=torch.float32)
    for mode in TrieMode:
        mine = ours.weight_sum(ws, mode)
        torch.testing.assert_close(mine, theirs.weight_sum(ws, mode=TheirMode(mode.value)))
        assert mine[ours.root] == pytest.approx(1.0)
        assert mine[ours.children[ours.root][(None, 6)]] == pytest.approx(0.05)


@pytest.fixture(scope="module")
def cl100k_vocab(tokenizer_of) -> list[Token]:
    tokens, _ = decode_vocab(tokenizer_of("cl100k"), vocab_size=100_352)  # holes, then padding
    return tokens


def _brute_force_sum(words_sorted, order, ws, prefix: bytes) -> float:
    """Sum of the weights of the tokens starting with ``prefix`` (bisect over sorted words)."""
    lo = bisect.bisect_left(words_sorted, prefix)
    hi = lo
    while hi < len(words_sorted) and words_sorted[hi].startswith(prefix):
        hi += 1
    return math.fsum(ws[order[lo:hi]])


def test_cl100k_with_holes_and_padding_builds_and_gives_correct_masses(cl100k_vocab):
    vocab = cl100k_vocab
    empty = [t.token_id for t in vocab if len(t) == 0]
    assert len(empty) > 16 and empty[-1] == len(vocab) - 1  # holes and padding
    ws = np.random.default_rng(0).dirichlet(np.full(len(vocab), 0.1))
    ws[empty[0]] = 0.5  # the largest weight sits on a hole
    ws /= ws.sum()
    trie = TokenCharacterTrie(vocab)
    masses, maxes = trie.weight_sum(ws), trie.weight_max(ws)

    # Against the dict-built oracle, node for node.
    oracle = ReferenceTokenCharacterTrie(vocab)
    np.testing.assert_array_equal(trie.idx_to_leaf, oracle.idx_to_leaf)
    np.testing.assert_array_equal(masses, oracle.weight_sum(ws))
    np.testing.assert_array_equal(maxes, oracle.weight_max(ws))

    # Every hole is a leaf of the root, counted at the root and nowhere else.
    root_edges = trie.children[trie.root]
    for i in empty:
        assert root_edges[(None, i)] == trie.token_leaf[i]
        assert masses[trie.token_leaf[i]] == ws[i]
    assert masses[trie.root] == pytest.approx(math.fsum(ws), rel=1e-14)
    assert maxes[trie.root] == ws[empty[0]]
    bytes_mass = math.fsum(masses[c] for e, c in root_edges.items() if isinstance(e, int))
    assert bytes_mass == pytest.approx(1 - math.fsum(ws[empty]), rel=1e-12)

    # Against the definition on a sample of nodes (every 499th, the root, its children).
    order = np.array(sorted(range(len(vocab)), key=lambda i: bytes(vocab[i])))
    words_sorted = [bytes(vocab[i]) for i in order]
    sample = {*range(0, trie.num_nodes, 499), trie.root, *root_edges.values()}
    for node in sorted(sample):
        if node in trie.leaf2word:
            continue
        expected = _brute_force_sum(words_sorted, order, ws, bytes(trie.node2prefix[node]))
        assert masses[node] == pytest.approx(expected, rel=1e-12, abs=1e-300), node

    # The parallel (float32) and byte tries agree.
    parallel = ParallelTokenCharacterTrie(vocab, device="cpu").weight_sum(ws)
    np.testing.assert_array_equal(parallel, masses.astype(np.float32))
    byte_trie = TokenByteTrie(vocab, eos_byte_strings={b"<|endoftext|>"})
    byte_masses = byte_trie.weight_sum(torch.from_numpy(ws), TrieMode.WITH_EOS)
    assert byte_masses[byte_trie.root] == pytest.approx(1.0, rel=1e-6)
    for i in empty[:3]:
        leaf = byte_trie.children[byte_trie.root][(None, i)]
        assert byte_masses[leaf] == np.float32(ws[i])

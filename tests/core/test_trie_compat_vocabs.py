"""Same results as genlm-backend 0.3.1 and genlm-bytes 0.2.0 on real vocabularies.

By default GPT-2 (50k tokens, byte-level BPE) and Llama-2 (32k, SentencePiece, whose
byte pieces duplicate other tokens' bytes), decoded by genlm-core's ``decode_vocab``
(the references get the same bytes as their own ``Token``s). With ``--slow`` (marked
``thorough``) also Llama-3 (128k, byte-level) and Gemma-3 (262k, SentencePiece): the
same cases at 2.5 and 8 times the size, whose reference tries took 12-34 s and 26-57 s
to build on this project's machine (depending on its load).
Compared: structure and node numbering, ``weight_sum`` and ``weight_max`` in
probability space (where the references' max is correct), single and batched:

* ``TokenCharacterTrie`` vs genlm-backend's ``TokenCharacterTrie``: bit for bit;
* ``ParallelTokenCharacterTrie`` vs genlm-backend's on the CPU: float32, sums to
  float32 rounding (genlm-backend adds in float32, we add in float64), max exact;
* ``TokenByteTrie`` vs genlm-bytes' in both ``TrieMode``s, with the vocabulary's
  EOS tokens.

Reference tries take seconds to build (~15-20 s each on Gemma-3), so each is built
once per vocabulary by a module-scoped fixture. genlm-backend's
``ParallelTokenCharacterTrie`` is a subclass of its ``TokenCharacterTrie`` that builds
the same trie first; a shallow copy of it retyped to the base class runs the
sequential kernels on that structure, which saves a build.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from genlm.backend.tokenization import Token as BackendToken
from genlm.backend.trie import ParallelTokenCharacterTrie as BackendParallel
from genlm.backend.trie import TokenCharacterTrie as BackendTrie
from genlm.bytes.trie import TokenByteTrie as TheirByteTrie
from genlm.bytes.trie import TrieMode as TheirMode

from genlm_core.tokenization import Token
from genlm_core.trie import ParallelTokenCharacterTrie, TokenByteTrie, TokenCharacterTrie, TrieMode

pytestmark = pytest.mark.filterwarnings("ignore:Sparse:UserWarning")  # inside the references

#: Asset name -> the byte strings of its end-of-sequence tokens.
EOS_STRINGS = {
    "gpt2-npm": {b"<|endoftext|>"},
    "llama2": {b"</s>", b"<s>"},  # two EOS strings, as Llama-3 and Gemma-3 have
    "llama3": {b"<|end_of_text|>", b"<|eot_id|>"},
    "gemma3": {b"<eos>", b"<end_of_turn>"},
}
BATCH = 3


@dataclass
class Vocab:
    name: str
    tokens: list[Token]
    backend_tokens: list[BackendToken]
    eos: set[bytes]
    probs: np.ndarray  # (BATCH, V) float64, Dirichlet(0.1): many tiny weights


@pytest.fixture(
    scope="module",
    params=[
        "gpt2-npm",
        "llama2",
        pytest.param("llama3", marks=pytest.mark.thorough),
        pytest.param("gemma3", marks=pytest.mark.thorough),
    ],
)
def vocab(request, decoded_vocab) -> Vocab:
    name = request.param
    tokens, _ = decoded_vocab(name)
    rng = np.random.default_rng(sum(map(ord, name)))
    return Vocab(
        name=name,
        tokens=tokens,
        backend_tokens=[BackendToken(t.token_id, bytes(t)) for t in tokens],
        eos=EOS_STRINGS[name],
        probs=rng.dirichlet(np.full(len(tokens), 0.1), size=BATCH),
    )


@pytest.fixture(scope="module")
def char_tries(vocab):
    """``(ours, ours_parallel, genlm-backend's TokenCharacterTrie, its Parallel one)``."""
    ours = TokenCharacterTrie(vocab.tokens)
    parallel = ParallelTokenCharacterTrie(vocab.tokens, device="cpu")
    their_parallel = BackendParallel(vocab.backend_tokens, device="cpu")
    theirs = copy.copy(their_parallel)  # same trie, genlm-backend's sequential methods
    theirs.__class__ = BackendTrie
    return ours, parallel, theirs, their_parallel


@pytest.fixture(scope="module")
def byte_tries(vocab):
    """``(ours, genlm-bytes' TokenByteTrie)`` with the vocabulary's EOS tokens."""
    ours = TokenByteTrie(vocab.tokens, eos_byte_strings=vocab.eos)
    theirs = TheirByteTrie(vocab.backend_tokens, device="cpu", eos_byte_strings=vocab.eos)
    return ours, theirs


def _sample_nodes(num_nodes: int, root: int) -> list[int]:
    return sorted({*range(0, num_nodes, 997), root, num_nodes - 2})


def test_character_trie_structure(vocab, char_tries):
    ours, _, theirs, _ = char_tries
    assert ours.root == theirs.root and ours.num_nodes == len(theirs.children)
    np.testing.assert_array_equal(ours.idx_to_leaf, theirs.idx_to_leaf)
    assert ours.word2leaf == theirs.word2leaf
    # Every edge of every node: the children CSR against genlm-backend's dicts.
    counts = np.fromiter(map(len, theirs.children), dtype=np.int64, count=ours.num_nodes)
    np.testing.assert_array_equal(np.diff(ours._arrays.child_ptr), counts)
    kids = np.fromiter(
        (c for edges in theirs.children for c in sorted(edges.values())),
        dtype=np.int64,
        count=int(counts.sum()),
    )
    np.testing.assert_array_equal(ours._arrays.child_idx, kids)
    for node in _sample_nodes(ours.num_nodes, ours.root):  # edge keys, in insertion order
        assert list(ours.children[node].items()) == list(theirs.children[node].items())
        assert ours.node2prefix[node] == theirs.node2prefix[node]


def test_character_trie_masses_bit_for_bit(vocab, char_tries):
    ours, _, theirs, _ = char_tries
    for op in ("weight_sum", "weight_max"):
        expected = np.stack([getattr(theirs, op)(p) for p in vocab.probs])
        for p, want in zip(vocab.probs, expected, strict=True):
            got = getattr(ours, op)(p)
            assert got.dtype == want.dtype == np.float64
            np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(getattr(ours, f"batch_{op}")(vocab.probs), expected)
        np.testing.assert_array_equal(getattr(theirs, f"batch_{op}")(vocab.probs), expected)


def _assert_float32_sums(mine, ref, counts, exact=None) -> None:
    """``ref`` (a float32 reference) is within its own summation error bound of ``mine``.

    Adding ``n`` non-negative float32 numbers in any order is off by at most
    ``(n - 1) * 2**-24`` times their sum; ``counts[v]`` is the number of weights below
    node ``v``. ``mine`` adds in float64 and rounds once, so it is the float32 nearest
    the exact sum (checked when ``exact`` is given) and never further from it than ``ref``.
    """
    mine64, ref64 = np.asarray(mine, np.float64), np.asarray(ref, np.float64)
    bound = (np.asarray(counts, np.float64) + 1) * 2.0**-24 * mine64 + 1e-45
    assert np.all(np.abs(ref64 - mine64) <= bound)
    if exact is not None:
        np.testing.assert_array_equal(mine, exact.astype(np.float32))
        assert np.all(np.abs(mine64 - exact) <= np.abs(ref64 - exact))


def test_parallel_trie_masses(vocab, char_tries):
    ours_seq, ours, theirs_seq, theirs = char_tries
    probs = vocab.probs.astype(np.float32)
    exact = ours_seq.batch_weight_sum(probs)  # float64, = genlm-backend's sequential sums
    np.testing.assert_array_equal(exact, theirs_seq.batch_weight_sum(probs))
    counts = ours_seq.weight_sum(np.ones(len(vocab.tokens)))
    for mine, ref, want in (
        (ours.batch_weight_sum(probs), theirs.batch_weight_sum(probs), exact),
        (ours.weight_sum(probs[0])[None], theirs.weight_sum(probs[0])[None], exact[:1]),
    ):
        assert mine.dtype == ref.dtype == np.float32 and mine.shape == ref.shape
        _assert_float32_sums(mine, ref, counts, want)
    np.testing.assert_array_equal(ours.batch_weight_max(probs), theirs.batch_weight_max(probs))
    np.testing.assert_array_equal(ours.weight_max(probs[1]), theirs.weight_max(probs[1]))


def test_byte_trie_structure(vocab, byte_tries):
    ours, theirs = byte_tries
    assert (ours.root, ours.eos_node, ours.num_nodes) == (
        theirs.root,
        theirs.eos_node,
        len(theirs.children),
    )
    np.testing.assert_array_equal(ours.token_id_to_leaf, theirs.token_id_to_leaf)
    assert ours.eos_token_ids == sorted(theirs.eos_token_ids) and ours.eos_token_ids
    assert ours.word2leaf == theirs.word2leaf
    for node in _sample_nodes(ours.num_nodes, ours.root):
        assert list(ours.children[node].items()) == list(theirs.children[node].items())
        assert ours.node2prefix[node] == theirs.node2prefix[node]


@pytest.mark.parametrize("mode", list(TrieMode))
def test_byte_trie_sums(vocab, byte_tries, mode):
    ours, theirs = byte_tries
    ws = torch.from_numpy(vocab.probs.astype(np.float32))
    their_mode = TheirMode(mode.value)
    mine, ref = ours.batch_weight_sum(ws, mode), theirs.batch_weight_sum(ws, mode=their_mode)
    assert mine.dtype == ref.dtype == torch.float32 and mine.shape == ref.shape
    counts = ours.weight_sum(torch.ones(len(vocab.tokens)), mode)  # weights below each node
    _assert_float32_sums(mine, ref, counts)
    single = ours.weight_sum(ws[2], mode)
    _assert_float32_sums(single, theirs.weight_sum(ws[2], mode=their_mode), counts)
    torch.testing.assert_close(single, mine[2], rtol=0, atol=0)
    eos_mass = ws[:, ours.eos_token_ids].double().sum(1).float()
    expected_eos = eos_mass if mode == TrieMode.WITH_EOS else torch.zeros(BATCH)
    torch.testing.assert_close(mine[:, ours.eos_node], expected_eos, rtol=1e-6, atol=0)


def test_byte_trie_max(vocab, byte_tries):
    ours, theirs = byte_tries
    ws = torch.from_numpy(vocab.probs.astype(np.float32))
    mine, ref = ours.batch_weight_max(ws), theirs.batch_weight_max(ws)
    single, single_ref = ours.weight_max(ws[0]), theirs.weight_max(ws[0])
    # The EOS node has no token below it: -inf here, 0 in genlm-bytes 0.2.0 (its clamp).
    assert torch.all(mine[:, ours.eos_node] == -torch.inf) and single[ours.eos_node] == -torch.inf
    assert torch.all(ref[:, theirs.eos_node] == 0)
    keep = torch.arange(ours.num_nodes) != ours.eos_node
    torch.testing.assert_close(mine[:, keep], ref[:, keep], rtol=0, atol=0)
    torch.testing.assert_close(single[keep], single_ref[keep], rtol=0, atol=0)
    torch.testing.assert_close(single, mine[0], rtol=0, atol=0)

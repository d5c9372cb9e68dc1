"""Every trie implementation against the brute-force definition of a node's mass.

mass_sum(v) = sum of ws[i] over the vocabulary entries i below v, and mass_max the
max; "below" an inner node means "the entry's word starts with the node's prefix",
below a leaf means "is that leaf's entry". Checked on random vocabularies (empty
and duplicate words, shared prefixes, long words), in probability and log space,
one distribution and batches, for every registered implementation plus the torch
one on the CPU.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from genlm_core.plugins import TrieRegistry, make_plugin_manager
from genlm_core.tokenization import Token
from genlm_core.trie import TokenCharacterTrie, TorchTokenCharacterTrie
from genlm_trie_numba import _plugin as numba_plugin

SETTINGS = settings(  # examples per test: the conftest's profile (more with --slow)
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _implementations() -> dict[str, object]:
    plugin_manager = make_plugin_manager(load_entrypoints=False)
    plugin_manager.register(numba_plugin, name="numba")  # the trie plugin's entry point
    registry = TrieRegistry(plugin_manager)
    impls = {r.name: r.spec.load() for r in registry.for_kind("character") if r.availability().ok}
    impls["torch-cpu-float64"] = lambda v: TorchTokenCharacterTrie(
        v, device="cpu", dtype=torch.float64
    )
    impls["torch-cpu-float32"] = lambda v: TorchTokenCharacterTrie(v, device="cpu")
    return impls


IMPLS = _implementations()


def test_expected_implementations_are_registered_and_available():
    assert {"numba", "reference", "sequential", "parallel"} <= set(IMPLS)


short_words = st.lists(st.sampled_from(b"ab\x00\xff"), max_size=5).map(bytes)
long_words = st.binary(min_size=12, max_size=40)
words = st.lists(st.one_of(short_words, short_words, short_words, long_words), max_size=24)


def _vocab(ws: list[bytes]) -> list[Token]:
    return [Token(i, w) for i, w in enumerate(ws)]


def _below(trie, node: int) -> list[int]:
    """Vocabulary positions below ``node``, by the definition (no trie arrays)."""
    if node in trie.leaf2word:
        return [pos for pos, leaf in enumerate(trie.token_leaf) if leaf == node]
    prefix = bytes(trie.node2prefix[node])
    return [i for i, t in enumerate(trie.decode) if bytes(t).startswith(prefix)]


def _tolerance(trie) -> tuple[float, float]:
    if np.dtype(trie.out_dtype) == np.float32:
        return 1e-5, 1e-37  # float32: rounding of the inputs, output (and sums, for torch)
    return 1e-12, 0.0


def _check_sum(trie, ws: np.ndarray, masses: np.ndarray) -> None:
    rtol, atol = _tolerance(trie)
    for node in range(len(trie.children)):
        below = _below(trie, node)
        exact = math.fsum(ws[below])
        scale = math.fsum(abs(ws[below]))
        assert abs(masses[node] - exact) <= rtol * scale + atol, (node, masses[node], exact)


def _check_max(trie, ws: np.ndarray, masses: np.ndarray) -> None:
    for node in range(len(trie.children)):
        below = _below(trie, node)
        expected = np.max(ws[below], initial=-np.inf).astype(trie.out_dtype)
        assert masses[node] == expected, (node, masses[node], expected)


def _structure_ok(trie, vocab: list[Token]) -> None:
    n = len(trie.children)
    prefixes = {w[:k] for w in vocab for k in range(len(w) + 1)} | {b""}
    assert n == len(prefixes) + len(vocab)
    assert trie.root == n - 1
    for i, w in enumerate(vocab):
        assert bytes(trie.node2prefix[int(trie.token_leaf[i])]) == bytes(w)
        assert trie.word2leaf[(bytes(w), i)] == trie.token_leaf[i]
    for node in range(n):
        for edge, child in trie.children[node].items():
            assert child < node  # post-order: children first
            if isinstance(edge, tuple):
                assert edge[0] is None and trie.token_leaf[edge[1]] == child
            else:
                assert trie.node2prefix[child] == [*trie.node2prefix[node], edge]


@pytest.mark.parametrize("impl", sorted(IMPLS))
@SETTINGS
@given(words=words, data=st.data())
def test_sum_matches_definition_probability_space(impl, words, data):
    vocab = _vocab(words)
    trie = IMPLS[impl](vocab)
    probs = st.floats(0.0, 1.0) | st.sampled_from([0.0, 1e-30, 1e-300, 1.0])
    ws = np.array(data.draw(st.lists(probs, min_size=len(vocab), max_size=len(vocab))), dtype=float)
    _structure_ok(trie, vocab)
    _check_sum(trie, ws, trie.weight_sum(ws))


@pytest.mark.parametrize("impl", sorted(IMPLS))
@SETTINGS
@given(words=words, data=st.data())
def test_max_matches_definition_log_space(impl, words, data):
    vocab = _vocab(words)
    trie = IMPLS[impl](vocab)
    logp = st.floats(-700.0, 0.0) | st.sampled_from([-np.inf, -1e-30, -1.0])
    ws = np.array(data.draw(st.lists(logp, min_size=len(vocab), max_size=len(vocab))), dtype=float)
    _check_max(trie, ws, trie.weight_max(ws))


@pytest.mark.parametrize("impl", sorted(IMPLS))
@SETTINGS
@given(words=words.filter(len), data=st.data())
def test_batches_match_definition_and_single_calls(impl, words, data):
    vocab = _vocab(words)
    trie = IMPLS[impl](vocab)
    batch = data.draw(st.integers(1, 5))
    values = st.floats(-50.0, 50.0)
    ws = np.array(
        data.draw(
            st.lists(
                st.lists(values, min_size=len(vocab), max_size=len(vocab)),
                min_size=batch,
                max_size=batch,
            )
        ),
        dtype=float,
    )
    sums, maxes = trie.batch_weight_sum(ws), trie.batch_weight_max(ws)
    assert sums.shape == maxes.shape == (batch, len(trie.children))
    for b in range(batch):
        _check_sum(trie, ws[b], sums[b])
        _check_max(trie, ws[b], maxes[b])
        atol = 1e-3 if np.dtype(trie.out_dtype) == np.float32 else 1e-9
        np.testing.assert_allclose(trie.weight_sum(ws[b]), sums[b], rtol=0, atol=atol)
        np.testing.assert_array_equal(trie.weight_max(ws[b]), maxes[b])


@SETTINGS
@given(words=words, data=st.data())
def test_numba_equals_reference_bit_for_bit(words, data):
    vocab = _vocab(words)
    fast, ref = IMPLS["numba"](vocab), IMPLS["reference"](vocab)
    np.testing.assert_array_equal(fast.parent, ref.parent)
    assert list(fast.children) == list(ref.children)
    ws = np.array(
        data.draw(st.lists(st.floats(-1e6, 1e6), min_size=len(vocab), max_size=len(vocab)))
    )
    np.testing.assert_array_equal(fast.weight_sum(ws), ref.weight_sum(ws))
    np.testing.assert_array_equal(fast.weight_max(ws), ref.weight_max(ws))


@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_tiny_mass_next_to_one_survives(impl):
    vocab = _vocab([b"a", b"aa", b"b", b"bb", b"c"])
    trie = IMPLS[impl](vocab)
    ws = np.array([1.0, 0.0, 1e-30, 0.0, 1e-30])
    tiny = np.float64(1e-30).astype(trie.out_dtype)
    for masses in (trie.weight_sum(ws), trie.batch_weight_sum([ws, ws])[1]):
        b_node = trie.children[trie.root][ord("b")]
        assert masses[b_node] == tiny
        assert masses[trie.token_leaf[4]] == tiny
        assert masses[trie.root] == np.float64(1.0 + 2e-30).astype(trie.out_dtype)


@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_max_of_log_probabilities_is_not_clamped_at_zero(impl):
    vocab = _vocab([b"ab", b"ac", b"b"])
    trie = IMPLS[impl](vocab)
    logp = np.log([0.5, 0.3, 0.2])
    masses = trie.weight_max(logp)
    assert masses[trie.root] == np.float64(np.log(0.5)).astype(trie.out_dtype)
    assert masses[trie.children[trie.root][ord("a")]] == np.float64(np.log(0.5)).astype(
        trie.out_dtype
    )
    assert masses[trie.children[trie.root][ord("b")]] == np.float64(np.log(0.2)).astype(
        trie.out_dtype
    )


@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_empty_vocabulary_has_only_the_root(impl):
    trie = IMPLS[impl]([])
    assert len(trie.children) == 1 and trie.root == 0
    assert trie.weight_sum(np.zeros(0))[0] == 0.0
    assert trie.weight_max(np.zeros(0))[0] == -np.inf
    assert trie.batch_weight_sum(np.zeros((2, 0))).shape == (2, 1)


@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_duplicate_byte_strings_get_a_leaf_each(impl):
    vocab = [Token(0, b"ab"), Token(1, b"ab"), Token(2, b""), Token(3, b"")]
    trie = IMPLS[impl](vocab)
    assert len(set(trie.token_leaf.tolist())) == 4
    masses = trie.weight_sum(np.array([0.1, 0.2, 0.3, 0.4]))
    assert masses[trie.token_leaf[0]] == np.float64(0.1).astype(trie.out_dtype)
    assert masses[trie.token_leaf[1]] == np.float64(0.2).astype(trie.out_dtype)
    node_ab = trie.children[trie.children[trie.root][ord("a")]][ord("b")]
    assert masses[node_ab] == pytest.approx(0.3)
    assert set(trie.children[trie.root]) == {ord("a"), (None, 2), (None, 3)}


def test_numba_batch_equals_single_bit_for_bit():
    rng = np.random.default_rng(0)
    vocab = _vocab(
        [bytes(rng.integers(0, 4, rng.integers(0, 7)).astype(np.uint8)) for _ in range(300)]
    )
    trie = TokenCharacterTrie(vocab)
    ws = rng.dirichlet(np.ones(len(vocab)), size=9)
    sums = trie.batch_weight_sum(ws)
    for b in range(len(ws)):
        np.testing.assert_array_equal(sums[b], trie.weight_sum(ws[b]))

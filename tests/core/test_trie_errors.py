"""Bad input fails loudly, naming the value and what was expected."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from genlm_core.errors import BackendUnavailableError, GenlmError
from genlm_core.tokenization import Token
from genlm_core.trie import (
    InvalidVocabularyError,
    InvalidWeightsError,
    ParallelTokenCharacterTrie,
    ReferenceTokenCharacterTrie,
    TokenCharacterTrie,
    TorchTokenCharacterTrie,
)

VOCAB = [Token(0, b"ab"), Token(1, b"a"), Token(2, b"b"), Token(3, b"abc")]
IMPLS = {
    "numba": TokenCharacterTrie,
    "parallel": lambda v: ParallelTokenCharacterTrie(v, device="cpu"),
    "reference": ReferenceTokenCharacterTrie,
    "torch-cpu": lambda v: TorchTokenCharacterTrie(v, device="cpu"),
}


@pytest.fixture(params=sorted(IMPLS))
def trie(request):
    return IMPLS[request.param](VOCAB)


def test_errors_are_value_errors_and_genlm_errors():
    assert issubclass(InvalidWeightsError, ValueError) and issubclass(
        InvalidWeightsError, GenlmError
    )
    assert issubclass(InvalidVocabularyError, ValueError)
    assert issubclass(InvalidVocabularyError, GenlmError)


def test_wrong_length_names_both_shapes(trie):
    with pytest.raises(InvalidWeightsError, match=r"shape \(4,\).*got shape \(3,\)"):
        trie.weight_sum(np.ones(3))
    with pytest.raises(InvalidWeightsError, match=r"\(batch, 4\).*got shape \(2, 5\)"):
        trie.batch_weight_max(np.ones((2, 5)))
    with pytest.raises(InvalidWeightsError, match=r"batch row 1: .*got shape \(5,\)"):
        trie.batch_weight_sum([np.ones(4), np.ones(5)])


def test_wrong_ndim_says_which_method_to_use(trie):
    with pytest.raises(InvalidWeightsError, match=r"shape \(2, 4\); use batch_weight_sum"):
        trie.weight_sum(np.ones((2, 4)))
    with pytest.raises(InvalidWeightsError, match=r"got an array of shape \(4,\); wrap one"):
        trie.batch_weight_sum(np.ones(4))
    with pytest.raises(InvalidWeightsError, match=r"shape \(1, 2, 4\)"):
        trie.batch_weight_max(np.ones((1, 2, 4)))
    with pytest.raises(InvalidWeightsError, match=r"shape \(\)"):
        trie.weight_max(np.float64(1.0))


@pytest.mark.parametrize(
    "bad",
    [
        np.ones(4, dtype=complex),
        np.ones(4, dtype=bool),
        np.array(["a", "b", "c", "d"]),
        np.array([1.0, None, 2.0, 3.0], dtype=object),
        torch.ones(4, dtype=torch.complex64),
        torch.ones(4, dtype=torch.bool),
    ],
    ids=["complex", "bool", "str", "object", "torch-complex", "torch-bool"],
)
def test_non_real_dtypes_are_rejected(trie, bad):
    with pytest.raises(InvalidWeightsError, match="must be real numbers, got .*dtype"):
        trie.weight_sum(bad)


def test_nan_names_the_entry_and_batch_row(trie):
    ws = np.array([0.1, np.nan, 0.2, 0.3])
    with pytest.raises(
        InvalidWeightsError, match=r"entry 1 \(Token\(token_id=1, byte_string=b'a'\)\).* NaN"
    ):
        trie.weight_sum(ws)
    with pytest.raises(InvalidWeightsError, match=r"entry 1 .* in batch row 2 is NaN"):
        trie.batch_weight_max(np.stack([np.ones(4), np.ones(4), ws]))


def test_accepted_inputs_give_the_same_masses(trie):
    expected = trie.weight_sum(np.array([1.0, 2.0, 3.0, 4.0]))
    for ws in (
        [1, 2, 3, 4],
        np.array([1, 2, 3, 4], dtype=np.int32),
        np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float16),
        np.array([1.0, 2.0, 3.0, 4.0, 0.0])[:4],
        np.array([1.0, 0.0, 2.0, 0.0, 3.0, 0.0, 4.0, 0.0])[::2],  # not contiguous
        torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.bfloat16),
        torch.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True),
    ):
        np.testing.assert_allclose(trie.weight_sum(ws), expected, rtol=1e-6)
    batch = trie.batch_weight_sum(
        [torch.tensor([1.0, 2.0, 3.0, 4.0]), np.array([1.0, 2.0, 3.0, 4.0])]
    )
    np.testing.assert_allclose(batch, np.stack([expected, expected]), rtol=1e-6)
    assert trie.batch_weight_sum([]).shape == (0, len(trie.children))


def test_infinities_are_allowed(trie):
    masses = trie.weight_max(np.array([-np.inf, -1.0, -np.inf, -np.inf]))
    assert masses[trie.root] == -1.0
    assert masses[trie.token_leaf[0]] == -np.inf


@pytest.mark.parametrize(
    ("entries", "match"),
    [
        ([Token(0, b"a"), Token(0, b"a")], r"decode\[1\] .* repeats decode\[0\].*same Token"),
        ([Token(0, b"a"), Token(1, b"b"), Token(0, b"a")], r"decode\[2\] .* repeats decode\[0\]"),
        ([b"a", b"b", b"a"], r"decode\[2\] = b'a' repeats decode\[0\].*pass Tokens"),
        (["ab", "ab"], r"entries must be unique"),
        ([b"a", 7], r"entry 1 is 7 \(int\), which is not iterable"),
        ([b"a", [1, 2]], r"entry 1 is \[1, 2\], which is unhashable"),
        ([b"a", ([1], 2)], r"entry 1 is \(\[1\], 2\), which is unhashable"),
    ],
)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("impl", ["numba", "reference"])
def test_bad_vocabularies_are_rejected(impl, entries, match):
    with pytest.raises(InvalidVocabularyError, match=match):
        IMPLS[impl](entries)


def test_same_bytes_under_different_kinds_are_not_duplicates():
    with pytest.warns(DeprecationWarning):
        trie = TokenCharacterTrie([Token(0, b"a"), b"a"])
    assert trie.word2leaf == {(b"a", 0): trie.token_leaf[0], b"a": trie.token_leaf[1]}


def test_invalid_device_is_rejected():
    with pytest.raises(ValueError, match="invalid device 'tpu'"):
        ParallelTokenCharacterTrie(VOCAB, device="tpu")


def test_cuda_device_without_cuda_says_so():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(BackendUnavailableError, match="device='cuda' .* sees no CUDA GPU"):
        ParallelTokenCharacterTrie(VOCAB, device="cuda")


def test_visualize_draws_nodes_and_masses():
    pytest.importorskip("graphviz")
    trie = TokenCharacterTrie(VOCAB)
    dot = trie.visualize(trie.weight_sum(np.ones(4)))
    source = dot.source
    assert f"{trie.root} ->" in source and "end of entry 3" in source and "98 'b'" in source
    with pytest.raises(
        ValueError, match=r"one value per trie node, shape \(9,\); got shape \(4,\)"
    ):
        trie.visualize(np.ones(4))


def test_visualize_without_graphviz_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "graphviz", None)  # makes `import graphviz` fail
    with pytest.raises(ImportError, match="pip install graphviz"):
        TokenCharacterTrie(VOCAB).visualize()

"""Ported from genlm-bytes 0.2.0 tests/test_trie.py (Apache-2.0), second half: EOS and bad input.

The hub tokenizer "gpt2" is the project's gpt2-npm asset; tests of private helpers are
rewritten against ours (noted where they are; listed in docs/migrating.md).
"""

import numpy as np
import pytest
import torch

from genlm_bytelm import TokenByteTrie
from genlm_bytelm.byte_lm.trie_state import TrieMode
from genlm_core.tokenization import Token


@pytest.fixture()
def decode():
    return [
        Token(token_id=0, byte_string=b"a"),
        Token(token_id=1, byte_string=b"b"),
        Token(token_id=2, byte_string=b"ab"),
        Token(token_id=3, byte_string=b"<eos>"),
    ]


@pytest.mark.asyncio
async def test_eos_token_configuration():
    """Test EOS token configuration in trie."""
    vocab = [
        Token(token_id=0, byte_string=b"hello"),
        Token(token_id=1, byte_string=b"world"),
        Token(token_id=2, byte_string=b"<eos>"),
    ]
    eos_byte_strings = [b"<eos>"]

    # Test trie with EOS tokens
    trie = TokenByteTrie(decode=vocab, eos_byte_strings=eos_byte_strings)

    # EOS token should be in the eos_byte_strings set
    assert b"<eos>" in trie.eos_byte_strings
    assert len(trie.eos_byte_strings) == 1

    # EOS token IDs should be populated
    assert len(trie.eos_token_ids) == 1
    assert trie.eos_token_ids[0] == 2  # "<eos>" is at index 2

    # EOS node should exist
    assert hasattr(trie, "eos_node")
    assert trie.eos_node is not None

    # EOS node should be connected to root
    assert trie.children[trie.root].get(257) == trie.eos_node


@pytest.mark.asyncio
async def test_eos_dual_matrix_behavior():
    """Test dual matrix behavior for propagate_eos vs no_eos modes."""
    vocab = [
        Token(token_id=0, byte_string=b"hello"),
        Token(token_id=1, byte_string=b"world"),
        Token(token_id=2, byte_string=b"<eos>"),
    ]
    eos_byte_strings = [b"<eos>"]

    trie = TokenByteTrie(decode=vocab, eos_byte_strings=eos_byte_strings)
    weights = torch.tensor([0.3, 0.4, 0.3])  # hello, world, <eos>

    # Test no_eos mode (no EOS node mass)
    masses_without_eos = trie.weight_sum(weights, mode=TrieMode.WITHOUT_EOS)

    # Test propagate_eos mode (excludes EOS tokens' mass from ancestors and moves it to the EOS node)
    masses_with_eos = trie.weight_sum(weights, mode=TrieMode.WITH_EOS)

    # Both should be valid arrays
    assert len(masses_without_eos) == len(trie.children)
    assert len(masses_with_eos) == len(trie.children)

    root_mass_without_eos = masses_without_eos[trie.root]
    root_mass_with_eos = masses_with_eos[trie.root]

    assert np.isclose(root_mass_without_eos.item(), 1.0, rtol=1e-5)
    assert np.isclose(root_mass_with_eos.item(), 1.0, rtol=1e-5)

    # The masses should be different between modes
    assert not np.allclose(masses_without_eos.cpu().numpy(), masses_with_eos.cpu().numpy())


@pytest.mark.asyncio
async def test_eos_weight_sum_with_eos():
    """Test weight_sum_with_eos method."""
    vocab = [
        Token(token_id=0, byte_string=b"hello"),
        Token(token_id=1, byte_string=b"world"),
        Token(token_id=2, byte_string=b"<eos>"),
    ]
    eos_byte_strings = [b"<eos>"]

    trie = TokenByteTrie(decode=vocab, eos_byte_strings=eos_byte_strings)
    weights = torch.tensor([0.3, 0.4, 0.1])  # hello, world, <eos>

    # Test with_eos mode
    masses_with_eos = trie.weight_sum(weights, mode=TrieMode.WITH_EOS)

    # Should return array with EOS node included
    assert len(masses_with_eos) == len(trie.children)
    assert not np.isnan(masses_with_eos.cpu().numpy()).any()

    # EOS node should have the EOS token probability
    eos_mass = masses_with_eos[trie.eos_node]
    assert np.isclose(eos_mass.item(), 0.1)  # EOS token weight


@pytest.mark.asyncio
async def test_eos_multiple_tokens():
    """Test with multiple EOS tokens."""
    vocab = [
        Token(token_id=0, byte_string=b"hello"),
        Token(token_id=1, byte_string=b"world"),
        Token(token_id=2, byte_string=b"dog"),
        Token(token_id=3, byte_string=b"dogs"),
    ]
    eos_byte_strings = [b"dog", b"dogs"]

    trie = TokenByteTrie(decode=vocab, eos_byte_strings=eos_byte_strings)

    # Should have both EOS tokens
    assert len(trie.eos_byte_strings) == 2
    assert b"dog" in trie.eos_byte_strings
    assert b"dogs" in trie.eos_byte_strings

    # Should have both EOS token IDs
    assert len(trie.eos_token_ids) == 2
    assert 2 in trie.eos_token_ids  # dog at index 2
    assert 3 in trie.eos_token_ids  # dogs at index 3

    # Test weight sum with multiple EOS tokens
    weights = torch.tensor([0.2, 0.3, 0.1, 0.8])  # hello, world, dog, dogs
    masses = trie.weight_sum(weights, mode=TrieMode.WITH_EOS)

    # EOS node should collect both EOS token masses
    eos_mass = masses[trie.eos_node]
    expected_eos_mass = 0.1 + 0.8  # dog + dogs
    assert np.isclose(eos_mass.item(), expected_eos_mass, rtol=1e-5)


def test_invalid_device():
    vocab = [
        Token(token_id=0, byte_string=b"a"),
        Token(token_id=1, byte_string=b"b"),
        Token(token_id=2, byte_string=b"c"),
    ]
    with pytest.raises(ValueError):
        TokenByteTrie(decode=vocab, device="invalid")


def test_plain_bytes_decode_deprecation():
    """Test that passing plain bytes to TokenByteTrie warns and converts."""
    with pytest.warns(
        DeprecationWarning, match="Passing plain bytes to TokenByteTrie is deprecated"
    ):
        trie = TokenByteTrie(decode=[b"a", b"b", b"ab"])
    assert all(isinstance(t, Token) for t in trie.decode)
    assert trie.decode[0].token_id == 0
    assert trie.decode[0].byte_string == b"a"


def test_invalid_eos_byte_strings():
    vocab = [
        Token(token_id=0, byte_string=b"a"),
        Token(token_id=1, byte_string=b"b"),
        Token(token_id=2, byte_string=b"c"),
    ]
    with pytest.raises(ValueError):
        TokenByteTrie(decode=vocab, eos_byte_strings=[b"d"])


def test_invalid_atomic_byte_strings():
    vocab = [
        Token(token_id=0, byte_string=b"a"),
        Token(token_id=1, byte_string=b"b"),
        Token(token_id=2, byte_string=b"c"),
    ]
    with pytest.raises(ValueError):
        TokenByteTrie(decode=vocab, atomic_byte_strings=[b"d"])


def test_duplicate_byte_strings_with_tokens():
    """Test that trie correctly handles multiple tokens with the same byte string."""
    # Create Token objects with duplicate byte strings
    vocab = [
        Token(token_id=0, byte_string=b"a"),
        Token(token_id=1, byte_string=b"hello"),
        Token(token_id=2, byte_string=b"hello"),  # Duplicate byte string!
        Token(token_id=3, byte_string=b"world"),
    ]

    trie = TokenByteTrie(decode=vocab)

    # Verify that all tokens got their own leaf nodes
    assert len(trie.token_id_to_leaf) == 4

    # Get the leaf nodes for duplicate tokens
    leaf_1 = trie.token_id_to_leaf[1][1]
    leaf_2 = trie.token_id_to_leaf[2][1]

    # Should have different leaf nodes
    assert leaf_1 != leaf_2, "Tokens with same byte_string should have different leaves"

    # Both should be valid leaf nodes
    assert leaf_1 in trie.leaf2word.keys()
    assert leaf_2 in trie.leaf2word.keys()


def test_duplicate_byte_strings_weight_sum():
    """Test that weight sums work correctly with duplicate byte strings."""
    vocab = [
        Token(token_id=0, byte_string=b"a"),
        Token(token_id=1, byte_string=b"hello"),
        Token(token_id=2, byte_string=b"hello"),  # Duplicate!
        Token(token_id=3, byte_string=b"world"),
    ]

    trie = TokenByteTrie(decode=vocab)

    # Assign different weights to the duplicate tokens
    weights = torch.tensor([0.1, 0.3, 0.5, 0.1])

    node_weights = trie.weight_sum(weights)

    # Get the leaf weights for the duplicate tokens
    leaf_1 = trie.token_id_to_leaf[1][1]
    leaf_2 = trie.token_id_to_leaf[2][1]

    # Each leaf should have its own weight
    assert np.isclose(node_weights[leaf_1].item(), 0.3, rtol=1e-5)
    assert np.isclose(node_weights[leaf_2].item(), 0.5, rtol=1e-5)

    # The parent node (at "hello" prefix) should have the sum of both
    # Find the shared parent node (before EOT edges)
    hello_prefix = list(b"hello")
    for node, prefix in trie.node2prefix.items():
        if prefix == hello_prefix and node not in trie.leaf2word:
            # This is the internal node before the EOT edges
            expected_sum = 0.3 + 0.5  # Sum of both "hello" tokens
            assert np.isclose(node_weights[node].item(), expected_sum, rtol=1e-5)
            break


def test_requires_token_objects():
    """Test that TokenByteTrie warns for raw bytes and rejects non-bytes types."""
    with pytest.warns(DeprecationWarning, match="Passing plain bytes"):
        TokenByteTrie(decode=[b"a", b"b", b"c"])

    with pytest.raises(TypeError, match="decode must contain Token objects"):
        TokenByteTrie(decode=["a", "b", "c"])


def test_empty_decode_raises():
    """Test that empty decode raises ValueError."""
    with pytest.raises(ValueError, match="decode cannot be empty"):
        TokenByteTrie(decode=[])

"""Ported from genlm-bytes 0.2.0 tests/test_healing.py (Apache-2.0), the tests without a model."""

import numpy as np
import pytest

from genlm_bytelm.byte_lm.heal import TokenHealer
from genlm_bytelm.byte_lm.trie_state import LazyTrieState
from genlm_bytelm.trie import AsyncTokenByteTrie
from genlm_core.tokenization import Token

# -------------------------
# Custom trie tests (no LM needed)
# -------------------------


class MinimalLMState:
    """Minimal LM state for testing - no real LLM needed."""

    def __init__(self, vocab_size=10):
        self.vocab_size = vocab_size

    def __lshift__(self, token_id):
        return MinimalLMState(self.vocab_size)

    async def logp_next(self):
        import torch

        # Return uniform log probabilities
        return torch.log(torch.ones(self.vocab_size) / self.vocab_size)


@pytest.mark.asyncio
async def test_healer_with_custom_trie_path_not_found():
    """Test healing when partial path doesn't exist"""
    # Simple vocab
    vocab = [
        Token(token_id=0, byte_string=b"a"),
        Token(token_id=1, byte_string=b"ab"),
        Token(token_id=2, byte_string=b"x"),
    ]
    async_trie = AsyncTokenByteTrie.from_vocab(vocab, device="cpu")

    lm_state = MinimalLMState(vocab_size=len(vocab))
    state = LazyTrieState(
        lm_state=lm_state,
        trie=async_trie,
        node=async_trie.trie.root,
        weight=0.0,
        mass=None,
        mode="without_eos",
        terminated=False,
    )
    state = await state.materialize()

    # Wrapper with invalid partial bytes (path doesn't exist)
    class StateWithBadPartial:
        def __init__(self, real_state):
            self.trie = real_state.trie
            self.weight = real_state.weight
            self.node = real_state.node
            self.mass = real_state.mass
            self.mode = real_state.mode
            self.lm_state = real_state.lm_state
            self.partial = [ord("z"), ord("z")]  # 'z' doesn't exist in trie

    bad_state = StateWithBadPartial(state)
    healer = TokenHealer(verbose=True)

    trie = bad_state.trie.trie
    base_weight = bad_state.weight - (bad_state.mass[bad_state.node] - bad_state.mass[trie.root])

    result = await healer._try_at_k(bad_state, trie, base_weight, k=1, next_byte=ord("x"))
    assert result is None  # Path doesn't exist


@pytest.mark.asyncio
async def test_healer_with_custom_trie_cant_extend():
    """Test when extend fails - no EOT at current position"""
    # Vocab where "ab" exists but NOT "a" - so after consuming 'a' there's no EOT
    vocab = [
        Token(token_id=0, byte_string=b"ab"),
        Token(token_id=1, byte_string=b"x"),
        Token(token_id=2, byte_string=b"y"),
    ]
    async_trie = AsyncTokenByteTrie.from_vocab(vocab, device="cpu")

    lm_state = MinimalLMState(vocab_size=len(vocab))
    state = LazyTrieState(
        lm_state=lm_state,
        trie=async_trie,
        node=async_trie.trie.root,
        weight=0.0,
        mass=None,
        mode="without_eos",
        terminated=False,
    )
    state = await state.materialize()

    class StateWithPartial:
        def __init__(self, real_state, partial_bytes):
            self.trie = real_state.trie
            self.weight = real_state.weight
            self.node = real_state.node
            self.mass = real_state.mass
            self.mode = real_state.mode
            self.lm_state = real_state.lm_state
            self.partial = partial_bytes

    # partial = "abz" where 'z' doesn't exist after 'ab'
    # At k=2: commit "ab", suffix = "z"
    # After commit at root, try 'z' - not in trie, fail

    # partial = "aba" where after committing "ab", we replay "a"
    # 'a' is at root, goes to node-after-a
    # At node-after-a, there's NO EOT (only "ab" is a token, not "a")
    # If next byte in suffix fails, we try extend() -> None

    # partial = "abaz" where:
    # k=2: commit "ab", suffix = "az"
    # Replay 'a' -> at node-after-a
    # Replay 'z' -> fails at node-after-a, try extend() -> NO EOT -> return None

    test_state = StateWithPartial(state, [ord("a"), ord("b"), ord("a"), ord("z")])
    healer = TokenHealer(max_splits=None, verbose=True)

    result = await healer.try_heal(test_state, next_byte=ord("x"))
    assert result is None


@pytest.mark.asyncio
async def test_healer_with_custom_trie_cant_consume_after_extend():
    """Test when byte can't be consumed even after extend"""
    # Vocab: "a", "ab" - 'a' exists so we CAN extend after consuming 'a'
    # But 'z' isn't in trie at all
    vocab = [
        Token(token_id=0, byte_string=b"a"),
        Token(token_id=1, byte_string=b"ab"),
        Token(token_id=2, byte_string=b"x"),
    ]
    async_trie = AsyncTokenByteTrie.from_vocab(vocab, device="cpu")

    lm_state = MinimalLMState(vocab_size=len(vocab))
    state = LazyTrieState(
        lm_state=lm_state,
        trie=async_trie,
        node=async_trie.trie.root,
        weight=0.0,
        mass=None,
        mode="without_eos",
        terminated=False,
    )
    state = await state.materialize()

    class StateWithPartial:
        def __init__(self, real_state, partial_bytes):
            self.trie = real_state.trie
            self.weight = real_state.weight
            self.node = real_state.node
            self.mass = real_state.mass
            self.mode = real_state.mode
            self.lm_state = real_state.lm_state
            self.partial = partial_bytes

    # partial = "aaz" where:
    # k=1: commit "a", suffix = "az"
    # Replay 'a' -> at node-after-a (has EOT for "a")
    # Replay 'z' -> fails, try extend() -> succeeds (commit "a") -> at root
    # Retry 'z' -> fails at root too -> return None

    test_state = StateWithPartial(state, [ord("a"), ord("a"), ord("z")])
    healer = TokenHealer(max_splits=None, verbose=True)

    result = await healer.try_heal(test_state, next_byte=ord("x"))
    assert result is None


def find_eot_edge(children, eot_sentinel):
    """Find an EOT edge in children dict. Returns (node, token_id) or (None, None)."""
    for key, node in children.items():
        if isinstance(key, tuple) and key[0] == eot_sentinel:
            return node, key[1]
    return None, None


def find_all_eot_edges(children, eot_sentinel):
    """Find all EOT edges in children dict. Returns list of (node, token_id)."""
    results = []
    for key, node in children.items():
        if isinstance(key, tuple) and key[0] == eot_sentinel:
            results.append((node, key[1]))
    return results


@pytest.mark.asyncio
async def test_healer_with_duplicate_tokens():
    """Test healing when there are duplicate tokens (multiple EOT edges at same position).

    This tests the scenario where multiple token IDs decode to the same byte string.
    The healer should try all possible EOT edges until one leads to a successful path.
    """
    # Vocab with duplicate tokens: both token 0 and token 1 decode to "a"
    # Token 2 = "x" for the next byte we want to consume
    vocab = [
        Token(token_id=0, byte_string=b"a"),  # First "a"
        Token(token_id=1, byte_string=b"a"),  # Duplicate "a"
        Token(token_id=2, byte_string=b"x"),
    ]
    async_trie = AsyncTokenByteTrie.from_vocab(vocab, device="cpu")

    # Verify the trie has two EOT edges at the node after 'a'
    trie = async_trie.trie
    node_after_a = trie.children[trie.root].get(ord("a"))
    assert node_after_a is not None, "Should have node after 'a'"

    eot_edges = find_all_eot_edges(trie.children[node_after_a], trie.eot_sentinel)
    assert len(eot_edges) == 2, f"Expected 2 EOT edges for duplicate 'a', got {len(eot_edges)}"

    lm_state = MinimalLMState(vocab_size=len(vocab))
    state = LazyTrieState(
        lm_state=lm_state,
        trie=async_trie,
        node=async_trie.trie.root,
        weight=0.0,
        mass=None,
        mode="without_eos",
        terminated=False,
    )
    state = await state.materialize()

    # Consume 'a' to get to a state where we have partial="a"
    state_after_a = state << ord("a")
    assert state_after_a is not None

    # Try to consume 'x' - should fail normally since 'x' is not a continuation of 'a'
    cant_continue = state_after_a << ord("x")
    assert cant_continue is None, "Should not be able to consume 'x' after 'a'"

    # Heal to consume 'x' - should succeed by committing one of the "a" tokens
    healer = TokenHealer(verbose=True)
    healed = await healer.try_heal(state_after_a, next_byte=ord("x"))
    assert healed is not None, "Healing should succeed with duplicate tokens"

    # Verify we're now at partial containing 'x'
    assert healed.partial == [ord("x")], f"Expected partial [120], got {healed.partial}"


@pytest.mark.asyncio
async def test_healer_extend_all_with_duplicates():
    """Test that extend_all is used correctly during healing replay.

    When stuck during replay and extend_all returns multiple extensions,
    healing should try all of them.
    """
    # Vocab:
    # - Token 0 = "ab" (first)
    # - Token 1 = "ab" (duplicate)
    # - Token 2 = "a"  (partial match)
    # - Token 3 = "x"
    #
    # Scenario: partial="aba", trying to consume 'x'
    # k=2: commit "ab" at position 2
    #   - replay 'a' -> at node after 'a'
    #   - replay 'x' -> can't continue, need extend
    #   - extend gives us duplicate "ab" tokens (but we only have "a" partial at this point)
    #   Actually this is getting complex. Let's simplify.

    # Simpler scenario:
    # - Token 0 = "a" (first)
    # - Token 1 = "a" (duplicate)
    # - Token 2 = "ab"
    # - Token 3 = "x"
    vocab = [
        Token(token_id=0, byte_string=b"a"),
        Token(token_id=1, byte_string=b"a"),  # duplicate
        Token(token_id=2, byte_string=b"ab"),
        Token(token_id=3, byte_string=b"x"),
    ]
    async_trie = AsyncTokenByteTrie.from_vocab(vocab, device="cpu")

    lm_state = MinimalLMState(vocab_size=len(vocab))
    state = LazyTrieState(
        lm_state=lm_state,
        trie=async_trie,
        node=async_trie.trie.root,
        weight=0.0,
        mass=None,
        mode="without_eos",
        terminated=False,
    )
    state = await state.materialize()

    # Consume "ab" to get partial="ab"
    state = state << ord("a")
    state = state << ord("b")
    assert state is not None

    # Try to consume 'x' - should fail
    cant_continue = state << ord("x")
    assert cant_continue is None

    # Heal should work by committing "ab" (token 2) and then consuming 'x'
    healer = TokenHealer(verbose=True)
    healed = await healer.try_heal(state, next_byte=ord("x"))
    assert healed is not None, "Healing should succeed"
    assert healed.partial == [ord("x")]


@pytest.mark.asyncio
async def test_healer_with_custom_trie_final_extend():
    """Test final extend path"""
    # Vocab: "a", "ab", "x"
    # After consuming "ab", there's an EOT
    # next_byte 'x' is at root but NOT after "ab"
    vocab = [
        Token(token_id=0, byte_string=b"a"),
        Token(token_id=1, byte_string=b"ab"),
        Token(token_id=2, byte_string=b"x"),
    ]
    async_trie = AsyncTokenByteTrie.from_vocab(vocab, device="cpu")

    lm_state = MinimalLMState(vocab_size=len(vocab))
    state = LazyTrieState(
        lm_state=lm_state,
        trie=async_trie,
        node=async_trie.trie.root,
        weight=0.0,
        mass=None,
        mode="without_eos",
        terminated=False,
    )
    state = await state.materialize()

    class StateWithPartial:
        def __init__(self, real_state, partial_bytes):
            self.trie = real_state.trie
            self.weight = real_state.weight
            self.node = real_state.node
            self.mass = real_state.mass
            self.mode = real_state.mode
            self.lm_state = real_state.lm_state
            self.partial = partial_bytes

    # partial = "abab" where:
    # k=2: commit "ab", suffix = "ab"
    # Replay 'a' -> node-after-a
    # Replay 'b' -> node-after-ab (has EOT for "ab")
    # Try next_byte 'x' -> not at node-after-ab
    # Try final extend() -> succeeds (commit "ab") -> at root
    # Retry 'x' -> succeeds at root

    test_state = StateWithPartial(state, [ord("a"), ord("b"), ord("a"), ord("b")])
    healer = TokenHealer(max_splits=None)

    result = await healer.try_heal(test_state, next_byte=ord("x"))
    assert result is not None


@pytest.mark.asyncio
async def test_healer_weight_calculation():
    """Test that healing computes weights correctly.

    Verifies the healed state weight matches manually computed expected value.
    """
    # Vocab: token 0 = "a", token 1 = "ab", token 2 = "x"
    vocab = [
        Token(token_id=0, byte_string=b"a"),
        Token(token_id=1, byte_string=b"ab"),
        Token(token_id=2, byte_string=b"x"),
    ]
    async_trie = AsyncTokenByteTrie.from_vocab(vocab, device="cpu")

    lm_state = MinimalLMState(vocab_size=len(vocab))

    # Create initial state at root
    initial_state = LazyTrieState(
        lm_state=lm_state,
        trie=async_trie,
        node=async_trie.trie.root,
        weight=0.0,
        mass=None,
        mode="without_eos",
        terminated=False,
    )
    initial_state = await initial_state.materialize()

    # Consume 'a' to get to a real state (not mocked partial)
    state_after_a = initial_state << ord("a")
    assert state_after_a is not None

    # Now we're at partial="a". If we try to consume 'x', it should fail
    # because 'x' is not a continuation of 'a' in this trie
    cant_continue = state_after_a << ord("x")
    assert cant_continue is None, "Should not be able to consume 'x' after 'a'"

    # Heal to consume 'x'
    healer = TokenHealer()
    healed = await healer.try_heal(state_after_a, next_byte=ord("x"))
    assert healed is not None, "Healing should succeed"

    # Manually compute expected weight:
    # 1. Healing commits token "a" (token_id=0) at k=1
    # 2. Then consumes 'x' from root
    #
    # After committing "a":
    #   - LM state advances by token 0
    #   - weight = base_weight + (mass[eot_node_for_a] - mass[root])
    #   - where base_weight = state.weight - (mass[state.node] - mass[root])
    #
    # After consuming 'x' from root:
    #   - weight += (mass[node_after_x] - mass[root])

    trie = async_trie.trie

    # Find the EOT node for "a"
    node_after_a = trie.children[trie.root].get(ord("a"))
    eot_node_for_a, _ = find_eot_edge(trie.children[node_after_a], trie.eot_sentinel)
    assert eot_node_for_a is not None

    # base_weight undoes the path from root to node_after_a
    # base_weight = state_after_a.weight - (mass[state_after_a.node] - mass[trie.root])

    # weight after committing "a"
    # mass = state_after_a.mass = [log(1/3), log(1/3), log(1/3)]
    # weight_after_commit = base_weight + (mass[eot_node_for_a] - mass[trie.root])

    # After committing, we need the mass from the new LM state (after token 0)
    # The healed state has already materialized with new mass
    # So we verify against the healed state directly

    # The healed state should be at node_after_x with partial = [ord('x')]
    assert healed.partial == [ord("x")], f"Expected partial [120], got {healed.partial}"

    # Verify weight is reasonable (not -inf, not 0 since we've consumed tokens)
    assert healed.weight < 0, "Weight should be negative (log prob)"
    assert healed.weight > -np.inf, "Weight should not be -inf"

    # Compute expected weight:
    # With uniform probs over 3 tokens: log(1/3) ≈ -1.099
    # mass[root] = logsumexp([log(1/3), log(1/3), log(1/3)]) = log(1) = 0
    # mass[eot_node] = log(1/3) for any single token
    # mass[node_after_x] = log(1/3) since only "x" is reachable
    #
    # After healing:
    # 1. Commit "a": weight = base_weight + (mass[eot_a] - mass[root]) = 0 + log(1/3) - 0 = log(1/3)
    # 2. Materialize gets new mass from new LM state (still uniform)
    # 3. Consume 'x': weight += (mass[node_x] - mass[root]) = log(1/3) + log(1/3) - 0 = 2*log(1/3)

    log_one_third = np.log(1 / 3)
    expected_weight = 2 * log_one_third  # ≈ -2.197

    assert np.isclose(healed.weight, expected_weight, rtol=0.01), (
        f"Expected weight ≈ {expected_weight:.4f}, got {healed.weight:.4f}"
    )

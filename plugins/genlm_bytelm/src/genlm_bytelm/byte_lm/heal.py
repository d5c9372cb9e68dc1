"""``TokenHealer``: another tokenization of the current token when a byte fits none.

genlm-bytes 0.2.0's algorithm and weights (docs/bytes.md, *Healing*); the model calls of
every backoff tried are asked for together up front, one forward.
"""

from __future__ import annotations

import asyncio
from typing import Any

from genlm_bytelm.byte_lm.trie_state import LazyTrieState, eot_edges, trie_path
from genlm_bytelm.display import format_byte

__all__ = ["TokenHealer"]


class TokenHealer:
    """Adaptive token healing for the byte beam.

    Args:
        max_backoff: Most bytes to back off (None: the whole partial token).
        max_splits: Most token boundaries inserted while replaying (None: no limit).
        verbose: Print each attempt.
    """

    def __init__(
        self,
        max_backoff: int | None = None,
        max_splits: int | None = None,
        verbose: bool = False,
    ) -> None:
        self.max_backoff = max_backoff
        self.max_splits = max_splits
        self.verbose = verbose

    async def try_heal(self, state: Any, next_byte: int) -> LazyTrieState | None:
        """A state that has read ``next_byte`` through another tokenization, or None."""
        partial = state.partial
        trie = state.trie.trie
        # Undo the current token's path: weight + mass[root] - mass[node].
        mass = state.mass
        base_weight = state.weight - (float(mass[state.node]) - float(mass[trie.root]))
        min_k = 0 if self.max_backoff is None else max(0, len(partial) - self.max_backoff)
        if self.verbose:
            print(
                f"[heal] Start: next_byte={format_byte(next_byte)}, "
                f"partial={bytes(partial)!r}, max_backoff={self.max_backoff}"
            )
        ks = range(len(partial), min_k - 1, -1)
        await _prefetch_commits(state, trie, list(ks))
        for k in ks:
            result = await self._try_at_k(state, trie, base_weight, k, next_byte)
            if result is not None:
                return result
        if self.verbose:
            print("[heal] FAILED: no valid healing found")
        return None

    async def _try_at_k(
        self, state: Any, trie: Any, base_weight: float, k: int, next_byte: int
    ) -> LazyTrieState | None:
        """Commit ``partial[:k]`` (each token id spelling it, in turn), then replay."""
        nodes = trie_path(trie, state.partial[:k])
        if len(nodes) <= k:
            return None  # no such path
        ends = eot_edges(trie, nodes[k])
        if not ends:
            if self.verbose:
                print(f"[heal] k={k}: no EOT at {bytes(state.partial[:k])!r}")
            return None
        for eot_node, eot_token_id in ends:
            result = await self._try_eot_at_k(
                state, trie, base_weight, k, next_byte, eot_node, eot_token_id
            )
            if result is not None:
                return result
        return None

    async def _try_eot_at_k(
        self,
        state: Any,
        trie: Any,
        base_weight: float,
        k: int,
        next_byte: int,
        eot_node: int,
        eot_token_id: int,
    ) -> LazyTrieState | None:
        """Commit token ``eot_token_id`` at ``k``, replay ``partial[k:]``, read the byte."""
        weight = base_weight + (float(state.mass[eot_node]) - float(state.mass[trie.root]))
        token_id = int(eot_token_id)
        current = await LazyTrieState(
            lm_state=state.lm_state << token_id,
            trie=state.trie,
            node=trie.root,
            weight=weight,
            mode=state.mode,
        ).materialize()
        if self.verbose:
            token_bytes = bytes(trie.decode[token_id])
            print(f"[heal] k={k}: commit {token_bytes!r} (token_id={token_id}), w={weight:.2f}")
        splits = 0
        for b in [*state.partial[k:], next_byte]:
            advanced = current << b
            if advanced is not None:
                current = advanced
                continue
            # The byte does not fit: end the token here (a split) and read it after.
            if self.max_splits is not None and splits >= self.max_splits:
                if self.verbose:
                    print(f"[heal] k={k}: hit max_splits={self.max_splits}")
                return None
            extensions = current.extend_all()
            if not extensions:
                if self.verbose:
                    print(f"[heal] k={k}: can't extend at {bytes(current.partial)!r}")
                return None
            splits += 1
            for extended in extensions:
                materialized = await extended.materialize()
                if self.verbose:
                    print(f"[heal] k={k}: split #{splits}, w={materialized.weight:.2f}")
                advanced = materialized << b
                if advanced is not None:
                    current = advanced
                    break
            else:
                if self.verbose:
                    print(f"[heal] k={k}: couldn't consume {format_byte(b)} even after extend")
                return None
        if self.verbose:
            print(f"[heal] SUCCESS at k={k}: w={current.weight:.2f}")
        return current


async def _prefetch_commits(state: Any, trie: Any, ks: list[int]) -> None:
    """Ask the model at once for the contexts every backoff ``k`` commits to (cache warming)."""
    lm_state = state.lm_state
    model = getattr(lm_state, "model", None)
    context = getattr(lm_state, "context", None)
    if model is None or context is None or len(ks) < 2:
        return
    contexts = []
    nodes = trie_path(trie, state.partial)
    for k in ks:
        if k < len(nodes):
            for _, token_id in eot_edges(trie, nodes[k]):
                contexts.append((lm_state << int(token_id)).context)
    if len(contexts) > 1:
        await asyncio.gather(*(model.next_token_logprobs(c) for c in contexts))

"""What ``ExactByteState`` is made of: canonical contexts and masked trie states.

[`ExactTrieState`][] masses count only the next tokens that keep the context
canonical, in float64; its weight at a token boundary is ``log p(context)`` plus the
log-mass of the canonical next tokens (the model is not renormalised).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from genlm_bytelm.byte_lm.lm_state import StatefulTokenizedLM
from genlm_bytelm.byte_lm.trie_state import LazyTrieState, TrieMode
from genlm_bytelm.exact.canonical import CanonicalFilter, Pending
from genlm_bytelm.exact.canonical.select import canonical_filter
from genlm_bytelm.shared_tries import locked, shared, shared_async

__all__ = ["CanonicalTokenizedLM", "ExactTrieState", "shared_filter", "shared_filter_async"]


class CanonicalTokenizedLM(StatefulTokenizedLM):
    """A token context that knows which next tokens keep it canonical (``pending``: its end)."""

    def __init__(self, model: Any, context: list[int], canon: CanonicalFilter, pending: Pending):
        super().__init__(model, context)
        self.canon = canon
        self.pending = pending

    def __lshift__(self, token: int) -> CanonicalTokenizedLM:
        """The context after ``token``."""
        token = int(token)
        return CanonicalTokenizedLM(
            self.model, [*self.context, token], self.canon, self.canon.extend(self.pending, token)
        )

    def mask(self, mode: Any, eos_ids: list[int]) -> np.ndarray:
        """Which next tokens keep the context canonical (boolean over token ids).

        In ``WITH_EOS`` mode the EOS tokens end the text: allowed when the context is the
        tokenizer's encoding of its text.
        """
        allowed = self.canon.mask(self.pending)
        if mode == TrieMode.WITH_EOS and eos_ids:
            allowed = allowed.copy()
            allowed[eos_ids] = self.canon.complete(self.pending)
        return allowed


class ExactTrieState(LazyTrieState):
    """A trie state over canonical next tokens only (see module doc)."""

    async def materialize(self) -> ExactTrieState:
        """Mask the model's distribution to canonical tokens; the weight gains their log-mass."""
        if self._mass is None:
            base = self.weight  # log p(context): materializing twice (concurrently) is harmless
            logps = await self.lm_state.logp_next()
            allowed = await locked(
                self.lm_state.canon, self.lm_state.mask, self.mode, self.trie.trie.eos_token_ids
            )
            values = torch.as_tensor(logps).detach().cpu().numpy().astype(np.float64, copy=False)
            masked = np.where(allowed[: len(values)], values, -np.inf)
            mass = await self.trie.log_weight_sum(masked, self.mode)
            # states are materialized at a token boundary (the root): add every next token
            self._mass = mass
            self.weight = base + float(mass[self.node])
        return self

    def __lshift__(self, b: int) -> ExactTrieState | None:
        """The state after byte ``b``, or None if no canonical token goes on with it."""
        out = super().__lshift__(b)
        if out is None or out.weight == -np.inf:
            return None
        return out


def shared_filter(llm: Any) -> CanonicalFilter:
    """The canonical filter of ``llm``'s tokenizer, built once per model.

    Raises:
        CanonicalityUnsupportedError: The tokenizer is not covered.
    """
    return shared(llm, "canonical filter", lambda: canonical_filter(llm.tokenizer, llm.byte_vocab))


async def shared_filter_async(llm: Any) -> CanonicalFilter:
    """[`shared_filter`][], built in a worker thread (once for concurrent callers)."""
    build = lambda: canonical_filter(llm.tokenizer, llm.byte_vocab)  # noqa: E731
    return await shared_async(llm, "canonical filter", build)

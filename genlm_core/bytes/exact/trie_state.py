"""The pieces ``ExactByteState`` is made of: canonical contexts and masked trie states.

* :class:`CanonicalTokenizedLM`: a token context over an AsyncLM that also knows its
  canonicality (the :class:`~genlm_core.bytes.exact.canonical.pending.Pending` end of it).
* :class:`ExactTrieState`: a :class:`LazyTrieState` whose masses count only the next
  tokens that keep the context canonical, computed in float64. Its weight is the
  log-probability of the bytes read along its context, summed over every canonical
  last token (no renormalisation of the model): at a token boundary, ``log p(context)``
  plus the log-mass of the canonical next tokens.
* :func:`shared_filter`: built once per model and shared (the registry of
  :mod:`genlm_core.bytes.shared_tries`, with the float64 trie).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from genlm_core.bytes.byte_lm.lm_state import StatefulTokenizedLM
from genlm_core.bytes.byte_lm.trie_state import LazyTrieState, TrieMode
from genlm_core.bytes.exact.canonical import CanonicalFilter, Pending
from genlm_core.bytes.exact.canonical.select import canonical_filter
from genlm_core.bytes.shared_tries import locked, shared, shared_async

__all__ = ["CanonicalTokenizedLM", "ExactTrieState", "shared_filter", "shared_filter_async"]


class CanonicalTokenizedLM(StatefulTokenizedLM):
    """A token context that knows which next tokens keep it canonical.

    Args:
        model: The AsyncLM.
        context: Token ids (the start token first).
        canon: The :class:`CanonicalFilter` of the model's tokenizer.
        pending: The context's unsettled end (:data:`EMPTY` after the start token).
    """

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

        In ``WITH_EOS`` mode the EOS tokens end the text: allowed when the context is
        the tokenizer's encoding of its text. In ``WITHOUT_EOS`` they are ordinary.
        """
        allowed = self.canon.mask(self.pending)
        if mode == TrieMode.WITH_EOS and eos_ids:
            allowed = allowed.copy()
            allowed[eos_ids] = self.canon.complete(self.pending)
        return allowed


class ExactTrieState(LazyTrieState):
    """A trie state over canonical next tokens only (see module doc)."""

    async def materialize(self) -> ExactTrieState:
        """Mask the model's distribution to canonical tokens and compute float64 masses.

        The first time, the weight (the context's log-probability) gains the log-mass of
        the canonical next tokens, so that it sums over every last token.
        """
        if self._mass is None:
            base = self.weight  # log p(context): materializing twice (concurrently) is harmless
            logps = await self.lm_state.logp_next()
            allowed = await locked(
                self.lm_state.canon, self.lm_state.mask, self.mode, self.trie_eos_ids
            )
            values = torch.as_tensor(logps).detach().cpu().numpy().astype(np.float64, copy=False)
            masked = np.where(allowed[: len(values)], values, -np.inf)
            mass = await self.trie.log_weight_sum(masked, self.mode)
            # states are materialized at a token boundary (the root): add every next token
            self._mass = mass
            self.weight = base + float(mass[self.node])
        return self

    @property
    def trie_eos_ids(self) -> list[int]:
        """Token ids of the EOS byte strings (those the trie counts at the EOS node)."""
        return self.trie.trie.eos_token_ids

    def __lshift__(self, b: int) -> ExactTrieState | None:
        """The state after byte ``b``, or None if no canonical token goes on with it."""
        out = super().__lshift__(b)
        if out is None or out.weight == -np.inf:
            return None
        return out


# -- shared per model ----------------------------------------------------------------------


def shared_filter(llm: Any) -> CanonicalFilter:
    """The :class:`CanonicalFilter` of ``llm``'s tokenizer, built once per model.

    Raises:
        CanonicalityUnsupportedError: The tokenizer is not byte-level BPE (or not one
            this reads); the message points to ``ByteBeamState``.
    """
    return shared(llm, "canonical filter", lambda: canonical_filter(llm.tokenizer, llm.byte_vocab))


async def shared_filter_async(llm: Any) -> CanonicalFilter:
    """:func:`shared_filter`, built in a worker thread (once for concurrent callers)."""
    build = lambda: canonical_filter(llm.tokenizer, llm.byte_vocab)  # noqa: E731
    return await shared_async(llm, "canonical filter", build)

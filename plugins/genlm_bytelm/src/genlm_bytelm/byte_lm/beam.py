"""``ByteBeamState``: a language model over bytes, by a beam over tokenizations.

Keeps the ``K`` heaviest partial tokenizations ([`LazyTrieState`][]) and reads one
byte at a time: genlm-bytes 0.2.0's algorithm, parameters and results (weights in
float64). How it batches model calls: docs/reports/bytes.md, *Speed, and where the time goes*.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import numpy as np

from genlm_bytelm.byte_lm.heal import TokenHealer
from genlm_bytelm.byte_lm.lm_state import (
    CandidateStates,
    StatefulByteLM,  # noqa: F401 - genlm-bytes' beam has it
    StatefulTokenizedLM,
    _as_bytes,
    advance_all,
    initial_token_ids,
)
from genlm_bytelm.byte_lm.params import BeamParams
from genlm_bytelm.byte_lm.pruning import certainly_dropped, decisions_unchanged
from genlm_bytelm.byte_lm.trie_state import LazyTrieState, TrieMode
from genlm_bytelm.errors import EmptyBeamError, InvalidBeamParamsError
from genlm_bytelm.probs import LazyByteProbs, check_byte, logsumexp, next_byte_logps
from genlm_bytelm.shared_tries import shared_trie_async
from genlm_core.trie.async_trie import AsyncTokenByteTrie  # noqa: F401 - genlm-bytes' beam has it

__all__ = ["BeamParams", "ByteBeamState"]


class ByteBeamState(CandidateStates):
    """A beam of candidate tokenizations of the bytes read (kept by decreasing weight)."""

    def __init__(self, states: list[LazyTrieState], params: BeamParams) -> None:
        self.states = sorted(states, key=lambda s: -s.weight)
        self.params = params

    @classmethod
    async def initial(
        cls,
        llm: Any,
        params: BeamParams,
        trie_opts: dict[str, Any] | None = None,
        *,
        initial_context: Any = None,
    ) -> ByteBeamState:
        """The beam before any byte: one candidate at the model's start token.

        The trie is built once per model and options, in a worker thread.

        Args:
            llm: Any token-level AsyncLM (``next_token_logprobs``, ``byte_vocab``, ``tokenizer``).
            params: Beam parameters (their ``eos_byte_strings`` configure the trie).
            trie_opts: Keyword arguments of ``AsyncTokenByteTrie.from_vocab``
                (e.g. ``{"backend": "numba"}``).
            initial_context: Token ids to start from instead of the start token (the
                tokenizer's BOS, else its EOS).

        Raises:
            InvalidBeamParamsError: ``params`` is not a ``BeamParams``.
            InvalidTokenIdsError: ``initial_context`` is not a non-empty list of token ids.
            MissingStartTokenError: No ``initial_context`` and no BOS or EOS token.
        """
        if not isinstance(params, BeamParams):
            raise InvalidBeamParamsError(
                f"params must be a BeamParams, got {type(params).__name__}; "
                f"e.g. BeamParams(K=5, prune_threshold=0.05)"
            )
        start = initial_token_ids(llm, initial_context)
        trie = await shared_trie_async(llm, params.eos_byte_strings, trie_opts)
        state = LazyTrieState(
            lm_state=StatefulTokenizedLM(llm, start),
            trie=trie,
            node=trie.trie.root,
            weight=0.0,
            mode=TrieMode.WITH_EOS,
        )
        return cls([await state.materialize()], params)

    async def __lshift__(self, a: int) -> ByteBeamState:
        """The beam after reading byte ``a`` (0-255) or ``EOS`` (257).

        Raises:
            InvalidByteError: ``a`` is not a byte or EOS.
            EmptyBeamError: This beam is empty.
        """
        return await self._advance(a, pruned_next=False)

    async def _advance(self, a: int, *, pruned_next: bool) -> ByteBeamState:
        """``self << a``; with ``pruned_next``, candidates the next prune drops are left out."""
        a = check_byte(a)
        if not self.states:
            raise EmptyBeamError(
                "cannot advance an empty beam: no tokenization of the bytes read so far "
                "was kept (raise K, lower prune_threshold, or enable healing)"
            )
        known = advance_all(self.states, a)
        log_z = logsumexp([s.weight for s in known]) if known else -math.inf
        extensions = await self._materialized_extensions(log_z, a if pruned_next else None, known)
        beam = ByteBeamState(known + advance_all(extensions, a), self.params)
        if self.params.heal and not beam.states:
            healed = await self._adaptive_heal(a)
            if healed is not None:
                if self.params.verbose:
                    print("[heal] Applied adaptive token healing")
                return healed
        if self.params.verbose:
            print()
            print(beam)
        return beam

    async def logp_next(self) -> LazyByteProbs:
        """Log-probabilities of the next byte (0-255), EOT (256, always -inf) and EOS (257).

        Raises:
            EmptyBeamError: The beam is empty.
        """
        if not self.states:
            raise EmptyBeamError("Beam is empty: it has no candidate to predict the next byte")
        return next_byte_logps(self.states, await self.extend(self.logZ))

    async def extend(self, logZ: float) -> list[LazyTrieState]:  # noqa: N803 - genlm-bytes' name
        """The candidates after ending their token, materialized, less those below the threshold."""
        return await self._materialized_extensions(logZ, None, [])

    async def _materialized_extensions(
        self, log_z: float, byte: int | None, known: list[LazyTrieState]
    ) -> list[LazyTrieState]:
        """The extensions above the threshold, materialized, in genlm-bytes' order.

        With ``byte``, those the prune after it surely drops (given ``known``) are left out.
        """
        candidates = [e for state in self.states for e in state.extend_all()]
        for e in candidates:
            log_z = np.logaddexp(log_z, e.weight)
        threshold = self.params.log_prune_threshold
        keep = [e for e in candidates if e.weight - log_z > threshold]
        todo = [e for e in keep if not e.is_materialized]
        if byte is not None and todo:
            skipped = await self._skip_dropped(todo, byte, known, keep)
            keep = [e for e in keep if id(e) not in skipped]
            todo = [e for e in todo if id(e) not in skipped]
        if todo:
            await asyncio.gather(*(e.materialize() for e in todo))
        return keep

    async def _skip_dropped(
        self,
        todo: list[LazyTrieState],
        byte: int,
        known: list[LazyTrieState],
        keep: list[LazyTrieState],
    ) -> set[int]:
        """Ids of the ``todo`` candidates the next prune drops whatever their masses."""
        k, threshold = self.params.K, self.params.log_prune_threshold
        exact = [s.weight for s in known]
        for e in keep:
            if e.is_materialized and (advanced := e << byte) is not None:
                exact.append(advanced.weight)
        dropped = certainly_dropped([e.weight for e in todo], exact, k, threshold)
        skipped = [e for e, drop in zip(todo, dropped, strict=True) if drop]
        if not skipped:
            return set()
        rest = [e for e, drop in zip(todo, dropped, strict=True) if not drop]
        await asyncio.gather(*(e.materialize() for e in rest))
        exact += [adv.weight for e in rest if (adv := e << byte) is not None]
        bounds = [e.weight for e in skipped]
        if not exact or not decisions_unchanged(exact, bounds, threshold):
            return set()  # leaving them out could change the beam: compute them too
        return {id(e) for e in skipped}

    def prune(self) -> ByteBeamState:
        """The ``K`` heaviest candidates whose share of the beam exceeds ``prune_threshold``."""
        threshold, log_z = self.params.log_prune_threshold, self.logZ
        kept = [s for s in self.states if s.weight - log_z > threshold][: self.params.K]
        return ByteBeamState(kept, self.params)

    def with_mode(self, mode: Any) -> ByteBeamState:
        """The same beam with every candidate in trie mode ``mode``."""
        return ByteBeamState([s.with_mode(mode) for s in self.states], self.params)

    async def prefill(self, bs: Any) -> ByteBeamState:
        """The beam after reading the bytes ``bs`` (EOS tokens are ordinary tokens meanwhile).

        ``beam = await (beam.prune() << b)`` for each byte in ``WITHOUT_EOS`` mode, faster: the
        model is asked for the likely tokenizations first, and sure-to-be-pruned candidates skipped.
        """
        from genlm_bytelm.byte_lm.prefill import WINDOW_BYTES, read_ahead

        data = _as_bytes(bs)
        beam = self.with_mode(TrieMode.WITHOUT_EOS)
        last = len(data) - 1
        for start in range(0, len(data), WINDOW_BYTES):
            end = min(len(data), start + WINDOW_BYTES)
            await read_ahead(beam.prune(), data[start:end])
            for i in range(start, end):
                beam = await beam.prune()._advance(data[i], pruned_next=i < last)
        return beam.with_mode(TrieMode.WITH_EOS)

    async def _adaptive_heal(self, next_byte: int) -> ByteBeamState | None:
        """A one-candidate beam that read ``next_byte`` by re-tokenizing, or None."""
        healer = TokenHealer(
            max_backoff=self.params.heal_max_backoff,
            max_splits=self.params.heal_max_splits,
            verbose=self.params.verbose,
        )
        for state in self.states:
            healed = await healer.try_heal(state, next_byte)
            if healed is not None:
                return ByteBeamState([healed], self.params)
        return None

    def __repr__(self) -> str:
        lines = [f"Z: {self.logZ}", "Candidates:"]
        for state in self.states:
            share = math.exp(state.weight - self.logZ) if self.states else 0.0
            mark = "" if share > self.params.prune_threshold else "  (below prune_threshold)"
            lines.append(f"({share:.4f}) {state!r}{mark}")
        return "\n".join(lines) + "\n"

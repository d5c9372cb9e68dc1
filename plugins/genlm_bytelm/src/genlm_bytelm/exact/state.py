"""``ExactByteState``: exact next-byte probabilities over canonical tokenizations.

``q(b)`` sums the model's probability over the canonical token strings covering ``b``
(docs/bytes.md, *Definitions*). Few candidates cover a byte string canonically, so they
are kept whole: no ``K``, no threshold. The interface is ``ByteBeamState``'s.
"""

from __future__ import annotations

import asyncio
import functools
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from genlm_bytelm.byte_lm.lm_state import (
    CandidateStates,
    _as_bytes,
    advance_all,
    initial_token_ids,
)
from genlm_bytelm.byte_lm.params import _byte_strings
from genlm_bytelm.byte_lm.trie_state import TrieMode
from genlm_bytelm.errors import EmptyBeamError
from genlm_bytelm.exact import prefill as exact_prefill
from genlm_bytelm.exact.canonical import EMPTY
from genlm_bytelm.exact.plan import Spellings, reading
from genlm_bytelm.exact.prefill import PlanNode, windowed_plan
from genlm_bytelm.exact.trie_state import (
    CanonicalTokenizedLM,
    ExactTrieState,
    shared_filter_async,
)
from genlm_bytelm.probs import LazyByteProbs, check_byte, next_byte_logps
from genlm_bytelm.shared_tries import locked, shared_async, shared_exact_trie_async
from genlm_core.errors import InvalidTokenIdsError
from genlm_core.lm import BatchedAsyncLM

__all__ = ["ExactByteState"]

#: Bytes predicted ahead, and contexts asked for ahead, per forward (speculation).
SPECULATE_BYTES = 12
SPECULATE_CONTEXTS = 24


@dataclass
class _Shared:
    """What the states of one ``initial`` call share: the model, filter, trie and options."""

    llm: Any
    canon: Any
    trie: Any
    eos_byte_strings: set[bytes]
    speculate: bool
    spell: Spellings
    asked: OrderedDict[tuple[int, ...], None]

    def remember(self, contexts: list[tuple[int, ...]]) -> None:
        """Note contexts the model was asked for (their rows are likely cached)."""
        for c in contexts:
            self.asked[c] = None
            self.asked.move_to_end(c)
        while len(self.asked) > 4096:
            self.asked.popitem(last=False)


class ExactByteState(CandidateStates):
    """Every canonical tokenization covering the bytes read; build it with [`initial`][]."""

    def __init__(self, states: list[ExactTrieState], shared: _Shared) -> None:
        self.states = sorted(states, key=lambda s: -s.weight)
        self.shared = shared

    @classmethod
    async def initial(
        cls,
        llm: Any,
        *,
        eos_byte_strings: Any = None,
        speculate: bool = True,
        initial_context: Any = None,
    ) -> ExactByteState:
        """The state before any byte: after the model's start token, or ``initial_context``.

        What a model needs (filter, trie) is built once per model, in a worker thread.

        Args:
            llm: Any token-level AsyncLM whose tokenizer is byte-level or SentencePiece BPE.
            eos_byte_strings: Byte strings of the tokens that end a sequence (as in
                ``BeamParams``): their probability goes to ``EOS`` (257).
            speculate: Ask for the contexts of predicted bytes in forwards that are
                needed anyway (saves forwards on backends that cache, e.g. genlm-hf).
            initial_context: Token ids to start from instead of the start token (the
                tokenizer's BOS, else its EOS); the bytes read after them are a text of their own.

        Raises:
            CanonicalityUnsupportedError: The tokenizer is not covered; use ``ByteBeamState``.
            InvalidBeamParamsError: ``eos_byte_strings`` is not a collection of bytes.
            InvalidTokenIdsError: ``initial_context`` is not a non-empty list of token ids.
            MissingStartTokenError: No ``initial_context`` and no BOS or EOS token.
        """
        eos = _byte_strings(eos_byte_strings)
        start = initial_token_ids(llm, initial_context)
        canon, trie = await asyncio.gather(
            shared_filter_async(llm), shared_exact_trie_async(llm, eos)
        )
        spell = await shared_async(
            llm,
            "spellings",
            lambda: Spellings(canon.byte_vocab, lambda i: canon.texts[i] is not None),
        )
        shared = _Shared(llm, canon, trie, eos, bool(speculate), spell, OrderedDict())
        context = CanonicalTokenizedLM(llm, start, canon, EMPTY)
        state = ExactTrieState(context, trie, trie.trie.root, 0.0)
        await state.materialize()
        return cls([state] if state.weight > -math.inf else [], shared)

    def prune(self) -> ExactByteState:
        """This state: nothing is pruned (kept for ``ByteBeamState``'s interface)."""
        return self

    async def __lshift__(self, a: int) -> ExactByteState:
        """The state after byte ``a`` (0-255) or ``EOS`` (257).

        Raises:
            InvalidByteError: ``a`` is not a byte or EOS.
            EmptyBeamError: No canonical tokenization covers the bytes read.
        """
        a = check_byte(a)
        self._check_nonempty()
        known = advance_all(self.states, a)
        return ExactByteState(known + advance_all(await self.extend(), a), self.shared)

    async def logp_next(self) -> LazyByteProbs:
        """Exact log-probabilities of the next byte (0-255), EOT (256, -inf) and EOS (257).

        Raises:
            EmptyBeamError: No canonical tokenization covers the bytes read.
        """
        self._check_nonempty()
        return next_byte_logps(self.states, await self.extend())

    async def extend(self) -> list[ExactTrieState]:
        """Every candidate that ends a canonical token here, in its new context (materialized)."""
        canon = self.shared.canon
        candidates = await locked(canon, self._extensions)  # new contexts: the filter's work
        todo = [e for e in candidates if not e.is_materialized]
        if todo:
            ahead = []
            if self.shared.speculate:
                ahead = [
                    _warm(self.shared.llm, list(c))
                    for c in await locked(canon, self._speculation, candidates)
                ]
            await asyncio.gather(*(e.materialize() for e in todo), *ahead)
            self.shared.remember([tuple(e.lm_state.context) for e in todo])
        return [e for e in candidates if e.weight > -math.inf]

    def _extensions(self) -> list[ExactTrieState]:
        return [e for s in self.states for e in s.extend_all() if e.weight > -math.inf]

    def _check_nonempty(self) -> None:
        if not self.states:
            raise EmptyBeamError(
                "no canonical tokenization covers the bytes read: their probability is 0 "
                "under this model (invalid UTF-8, or bytes after EOS)"
            )

    def _speculation(self, extensions: list[ExactTrieState]) -> list[tuple[int, ...]]:
        """The new contexts along the predicted next bytes, when a forward happens anyway."""
        shared = self.shared
        new = [e for e in extensions if tuple(e.lm_state.context) not in shared.asked]
        if not new or not self.states:
            return []
        predicted = _predict(self.states[0], SPECULATE_BYTES)
        if not predicted:
            return []
        origins = [(s.lm_state, bytes(s.partial)) for s in self.states if not s.terminated]
        origins += [(e.lm_state, b"") for e in extensions]
        contexts = []
        for lm_state in reading(origins, predicted, shared.spell):
            context = tuple(lm_state.context)
            if context not in shared.asked:
                contexts.append(context)
            if len(contexts) >= SPECULATE_CONTEXTS:
                break
        shared.remember(contexts)
        return contexts

    async def prefill(self, bs: Any) -> ExactByteState:
        """The state after the bytes ``bs`` (EOS tokens are ordinary tokens meanwhile).

        Same result as ``state << b`` for each byte in ``TrieMode.WITHOUT_EOS``; faster: the
        contexts needed are listed first, without the model, and asked for window by window.
        """
        data = _as_bytes(bs)
        if not data:
            return self
        self._check_nonempty()
        shared = self.shared
        readers = [s for s in self.states if not s.terminated]  # nothing follows EOS
        roots = []
        for state in readers:
            root = PlanNode(
                list(state.lm_state.context),
                (),
                state.lm_state.pending,
                -len(state.partial),
                partial=bytes(state.partial),
            )
            root.logp = state.weight - float(state.mass[state.node])
            roots.append(root)
        ends = await windowed_plan(
            roots,
            data,
            shared.spell,
            shared.canon,
            functools.partial(_entries, shared.llm),
            functools.partial(locked, shared.canon),
            window=exact_prefill.WINDOW_BYTES,
        )
        finals = [(self._context(root), root.logp, root.partial + data) for root in roots]
        finals += [(self._context(n), n.logp, data[n.end :]) for n in ends]
        states = await asyncio.gather(*(self._advanced(*final) for final in finals))
        kept = [s.with_mode(TrieMode.WITH_EOS) for s in states if s is not None]
        return ExactByteState(kept, shared)

    def _context(self, node: PlanNode) -> CanonicalTokenizedLM:
        return CanonicalTokenizedLM(self.shared.llm, node.context, self.shared.canon, node.pending)

    async def _advanced(
        self, lm_state: CanonicalTokenizedLM, logp: float, rest: bytes
    ) -> ExactTrieState | None:
        """A fresh candidate in ``lm_state`` (log-probability ``logp``) past ``rest``, or None."""
        if not self.shared.spell.starts(rest):
            return None
        if not math.isfinite(logp):
            return None
        trie = self.shared.trie
        state = ExactTrieState(lm_state, trie, trie.trie.root, logp, mode=TrieMode.WITHOUT_EOS)
        await state.materialize()
        current: ExactTrieState | None = state
        for b in rest:
            if current is None:
                return None
            current = current << b
        return current

    def __repr__(self) -> str:
        lines = [f"Z: {self.logZ}", "Candidates:"]
        for state in self.states:
            lines.append(f"({math.exp(state.weight - self.logZ):.4f}) {state!r}")
        return "\n".join(lines) + "\n"


def _predict(state: ExactTrieState, limit: int) -> bytes:
    """The likeliest bytes after ``state``'s position, down its trie by mass (at most ``limit``)."""
    out = bytearray()
    mass, children, node = state.mass, state.children, state.node
    while len(out) < limit:
        best, best_mass, stop_mass = None, -math.inf, -math.inf
        for key, child in children[node].items():
            m = float(mass[child])
            if isinstance(key, int) and key < 256 and m > best_mass:
                best, best_mass = (key, child), m
            elif type(key) is tuple:
                stop_mass = max(stop_mass, m)
        if best is None or best_mass <= stop_mass:
            break
        out.append(best[0])
        node = best[1]
    return bytes(out)


async def _warm(llm: Any, context: list[int]) -> None:
    """Ask for a context's distribution to fill the model's cache (errors ignored)."""
    try:
        await llm.next_token_logprobs(context)
    except InvalidTokenIdsError:
        pass  # past the model's context window: the real call reports it


async def _entries(
    llm: Any, chain: list[PlanNode], nodes: list[PlanNode]
) -> dict[int, list[float]]:
    """For each node (by ``id``), its children's tokens' log-probabilities after it.

    One prefix call along the chain, batched calls for the rest, within [`.prefill`][]'s budgets.
    """
    # Nodes with the same context share a row. A context is keyed by its shared
    # prefix list (by identity) and its tail: no copy or hash of its token ids, which
    # grow with the text (a 1 MB text: 250k of them per context).
    by_context: dict[tuple[int, tuple[int, ...]], list[PlanNode]] = {}
    for node in nodes:
        by_context.setdefault(_key(node), []).append(node)
    out: dict[int, list[float]] = {}

    def read(key: tuple[int, tuple[int, ...]], row: Any) -> None:
        for node in by_context.pop(key, ()):
            out[id(node)] = row[[c.token for c in node.children]].tolist()

    width = max(1, len(llm.byte_vocab)) * 4
    prefix = getattr(llm, "prefix_next_token_logprobs", None)
    kw = {"cache": False} if isinstance(llm, BatchedAsyncLM) else {}  # rows read once
    if prefix is not None and len(chain) > 1:
        sequence = chain[-1].context
        start = chain[0].n_tokens - 1  # row i of a call from lo is chain[lo + i - start]
        # A model that computes a sequence's prefixes in one call, asked with cache=False,
        # makes no key (copy of the ids) per row: only the rows' bytes bound the call, so
        # each call's own passes over the ids are paid for fewer calls (1 MB: 567 -> 326 s).
        one_call = isinstance(llm, BatchedAsyncLM) and llm.computes_prefixes_in_one_forward
        step = _rows_per_call(width, 1 if one_call else len(sequence))
        for lo in range(start, len(sequence), step):
            hi = min(len(sequence), lo + step)
            rows = await prefix(sequence[:hi], start=lo, **kw)
            for i, row in enumerate(rows):
                read(_key(chain[lo + i - start]), row)
            del rows
    rest = list(by_context)
    while rest:
        step = _rows_per_call(width, max(by_context[k][0].n_tokens for k in rest[:4096]))
        batch, rest = rest[:step], rest[step:]
        rows = await llm.batch_next_token_logprobs([by_context[k][0].context for k in batch], **kw)
        for key, row in zip(batch, rows, strict=True):
            read(key, row)
        del rows
    return out


def _key(node: PlanNode) -> tuple[int, tuple[int, ...]]:
    """A node's context as a cheap key: its prefix list's identity and its tail."""
    return id(node.prefix), node.tail


def _rows_per_call(row_bytes: int, n_tokens: int) -> int:
    """Rows one call may ask for within the budgets (at least one)."""
    return max(
        1,
        min(
            exact_prefill.CALL_ROW_BYTES // row_bytes,
            exact_prefill.CALL_TOKEN_IDS // max(1, n_tokens),
        ),
    )

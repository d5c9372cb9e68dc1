"""A language model over bytes, built on any token-level AsyncLM (genlm-bytes 0.2.0).

The probability of a byte string sums over its tokenizations; :class:`ByteBeamState`
keeps a beam of the likeliest ones and reads (or generates) one byte at a time, so
programs can condition and constrain at the byte level whatever the tokenizer.
Migrating from genlm-bytes is an import rename (``genlm.bytes`` -> ``genlm_core.bytes``,
submodules included)::

    from genlm_core import load_model_by_name
    from genlm_core.bytes import BeamParams, ByteBeamState

    llm = load_model_by_name("path/to/model", backend="hf")
    beam = await ByteBeamState.initial(llm, BeamParams(K=5, prune_threshold=0.05))
    beam = await beam.prefill(b"An apple a day keeps the ")
    logp = await beam.logp_next()            # 258 entries: bytes, EOT (256), EOS (257)
    beam = await (beam.prune() << ord("d"))

For byte-level BPE models (GPT-2, Llama-3, SmolLM2, ...), :class:`ExactByteState` has
the same interface and computes the next-byte distribution exactly over canonical
tokenizations, with no ``K`` and no threshold::

    state = await ExactByteState.initial(llm)
    state = await state.prefill(b"The capital of Fra")   # logZ: exact log P(bytes)

See ``docs/bytes.md`` for what each computes, and how ``K`` and pruning trade accuracy
for speed. The beam is :mod:`.byte_lm` (genlm-bytes' paths), the exact state and its
canonical filters :mod:`.exact`; what they build once per model is in :mod:`.shared_tries`.
"""

from __future__ import annotations

from genlm_core.bytes.byte_lm.beam import ByteBeamState
from genlm_core.bytes.byte_lm.heal import TokenHealer
from genlm_core.bytes.byte_lm.lm_state import StatefulTokenizedLM
from genlm_core.bytes.byte_lm.params import BeamParams
from genlm_core.bytes.byte_lm.trie_state import LazyTrieState
from genlm_core.bytes.chart import Chart
from genlm_core.bytes.errors import (
    CanonicalityUnsupportedError,
    EmptyBeamError,
    InvalidBeamParamsError,
    InvalidByteError,
    InvalidByteProbsError,
    MissingStartTokenError,
    NaNLogProbError,
    NotMaterializedError,
)
from genlm_core.bytes.exact.state import ExactByteState
from genlm_core.bytes.likelihood import TextLikelihood, log_likelihood
from genlm_core.bytes.probs import EOS, EOT, LazyByteProbs
from genlm_core.trie.async_trie import AsyncTokenByteTrie
from genlm_core.trie.byte_trie import TokenByteTrie, TrieMode

__all__ = [
    "EOS",
    "EOT",
    "AsyncTokenByteTrie",
    "BeamParams",
    "ByteBeamState",
    "CanonicalityUnsupportedError",
    "Chart",
    "EmptyBeamError",
    "ExactByteState",
    "InvalidBeamParamsError",
    "InvalidByteError",
    "InvalidByteProbsError",
    "LazyByteProbs",
    "LazyTrieState",
    "MissingStartTokenError",
    "NaNLogProbError",
    "NotMaterializedError",
    "StatefulTokenizedLM",
    "TokenByteTrie",
    "TextLikelihood",
    "TokenHealer",
    "TrieMode",
    "log_likelihood",
]

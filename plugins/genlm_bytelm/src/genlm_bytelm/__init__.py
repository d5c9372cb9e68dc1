"""A language model over bytes, built on any token-level AsyncLM (genlm-bytes 0.2.0).

[`ByteBeamState`][] keeps a beam of the likeliest tokenizations of the bytes read and
reads (or generates) one byte at a time; [`ExactByteState`][] has the same interface
and computes the next-byte distribution exactly over canonical tokenizations (byte-level
BPE and SentencePiece BPE tokenizers). It ships apart from genlm-core (``pip install
genlm-bytelm``); migrating from genlm-bytes is an import rename (``genlm.bytes`` ->
``genlm_bytelm``, or ``genlm_core.bytes``, an alias of this package, submodules included)::

    from genlm_core import load_model_by_name
    from genlm_bytelm import BeamParams, ByteBeamState, ExactByteState

    llm = load_model_by_name("path/to/model", backend="hf")
    beam = await ByteBeamState.initial(llm, BeamParams(K=5, prune_threshold=0.05))
    beam = await beam.prefill(b"An apple a day keeps the ")
    logp = await beam.logp_next()            # 258 entries: bytes, EOT (256), EOS (257)
    beam = await (beam.prune() << ord("d"))
    state = await (await ExactByteState.initial(llm)).prefill(b"The capital of Fra")

See ``docs/bytes.md`` for what each computes and what it costs.
"""

from __future__ import annotations

__version__ = "0.1.0"

from genlm_bytelm.byte_lm.beam import ByteBeamState
from genlm_bytelm.byte_lm.heal import TokenHealer
from genlm_bytelm.byte_lm.lm_state import StatefulTokenizedLM
from genlm_bytelm.byte_lm.params import BeamParams
from genlm_bytelm.byte_lm.trie_state import LazyTrieState
from genlm_bytelm.chart import Chart
from genlm_bytelm.errors import (
    CanonicalityUnsupportedError,
    EmptyBeamError,
    InvalidBeamParamsError,
    InvalidByteError,
    InvalidByteProbsError,
    MissingStartTokenError,
    NaNLogProbError,
    NotMaterializedError,
)
from genlm_bytelm.exact.state import ExactByteState
from genlm_bytelm.likelihood import TextLikelihood, log_likelihood
from genlm_bytelm.probs import EOS, EOT, LazyByteProbs
from genlm_core.trie.async_trie import AsyncTokenByteTrie
from genlm_core.trie.protocols import TrieMode
from genlm_trie_numba.byte_trie import TokenByteTrie

__all__ = [
    "__version__",
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

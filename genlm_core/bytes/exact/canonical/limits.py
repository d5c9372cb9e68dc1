"""How far ahead the canonical filter must look, bounded from the tokenizer's pieces.

A token whose pre-token cannot end right after it is canonical only if some next
tokens continue that pre-token and end it (:meth:`CanonicalFilter._straddles`). The
search for those tokens goes one token deeper only from a *forced* context: one that
no next token can close. A chain of forced contexts is bounded by the tokenizer:

* **Vocabulary** (``ignore_merges`` only): a pre-token spelled by several tokens
  cannot end where its text is a vocabulary entry the merges never build (the
  tokenizer would write that entry). A context is forced that way only while every
  token that would end its open pre-token makes such an entry, so while the open
  pre-token's bytes are a proper prefix of one; each token adds a byte, so at most
  ``longest such entry`` contexts in a row.
* **Pre-tokenizer**: a boundary is decided within the regexes' lookahead (characters
  past a match: quantifier bounds, literal sequences such as ``'ll``), the same
  assumption the pre-token tables rest on; each token adds a character.

The search is exact within that bound, which is computed when the filter is built;
a bound too large for the recursion raises
:class:`~genlm_core.bytes.errors.CanonicalityUnsupportedError` then, never during
generation.
"""

from __future__ import annotations

from typing import Any

from genlm_core.bytes.errors import CanonicalityUnsupportedError

__all__ = ["MAX_STRADDLE_DEPTH", "straddle_depth"]

#: The largest straddle bound accepted (each level is a few Python frames).
MAX_STRADDLE_DEPTH = 128


def straddle_depth(spec: Any, pairs: Any, pretok: Any, texts: list[Any]) -> int:
    """Tokens the straddle search may follow beyond a token (see module doc).

    Args:
        spec: The :class:`~genlm_core.bytes.exact.canonical.spec.TokenizerSpec`.
        pairs: Its :class:`~genlm_core.bytes.exact.canonical.bpe.BPEPairs`.
        pretok: Its :class:`~genlm_core.bytes.exact.canonical.pretok.Pretokenizer`.
        texts: The filter's per-token texts (None for tokens never in a text).

    Raises:
        CanonicalityUnsupportedError: The bound exceeds :data:`MAX_STRADDLE_DEPTH`.
    """
    vocabulary = 0
    if spec.ignore_merges:
        vocabulary = max(
            (
                len(data)
                for data, i in pairs.underivable_bytes.items()
                if i < len(texts) and texts[i] is not None
            ),
            default=0,
        )
    depth = 1 + pretok.lookahead + vocabulary
    if depth > MAX_STRADDLE_DEPTH:
        raise CanonicalityUnsupportedError(
            f"ExactByteState cannot bound the canonicality search for {spec.name}: a "
            f"pre-token may have to be followed {depth} tokens ahead (pre-tokenizer "
            f"lookahead {pretok.lookahead} characters, longest vocabulary entry its "
            f"merges never build {vocabulary} bytes), over the limit of "
            f"{MAX_STRADDLE_DEPTH}. Use ByteBeamState, which sums over every tokenization."
        )
    return depth

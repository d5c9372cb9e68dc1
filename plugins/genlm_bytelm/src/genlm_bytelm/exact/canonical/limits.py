"""How far ahead the canonical filter must look, bounded from the tokenizer's pieces.

The straddle search goes one token deeper only from a context no next token closes; the
pre-tokenizer's lookahead and (with ``ignore_merges``) the longest vocabulary entry the
merges never build bound such runs (docs/bytes-design.md, *Exactness, tested*).
"""

from __future__ import annotations

from typing import Any

from genlm_bytelm.errors import CanonicalityUnsupportedError

__all__ = ["MAX_STRADDLE_DEPTH", "straddle_depth"]

#: The largest straddle bound accepted (each level is a few Python frames).
MAX_STRADDLE_DEPTH = 128


def straddle_depth(spec: Any, pairs: Any, pretok: Any, texts: list[Any]) -> int:
    """Tokens the straddle search may follow beyond a token; over the limit raises (see module)."""
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

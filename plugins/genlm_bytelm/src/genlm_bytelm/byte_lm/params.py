"""``BeamParams``: the knobs of the byte-level beam, validated on construction."""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass
from typing import Any

from genlm_bytelm.errors import InvalidBeamParamsError
from genlm_core.checks import is_integer

__all__ = ["BeamParams"]


@dataclass
class BeamParams:
    """Parameters of the byte-level beam (genlm-bytes 0.2.0's, same names and defaults).

    Args:
        K: Beam width: most candidate tokenizations kept after each byte (>= 1).
        prune_threshold: Candidates whose share of the beam's probability is at most
            this are dropped (0 keeps all, up to ``K``); in ``[0, 1)``.
        verbose: Print the beam after every byte and healing steps.
        eos_byte_strings: Byte strings of the tokens that end a sequence (their
            probability goes to the virtual byte ``EOS`` = 257).
        heal: When the next byte fits no candidate, try other tokenizations of the
            current token (adaptive token healing) instead of emptying the beam.
        heal_max_backoff: Most bytes healing may back off (None: no limit).
        heal_max_splits: Most extra token boundaries one healing may insert (None: no
            limit; 0: only one split).
        eos_tokens: Deprecated name of ``eos_byte_strings``.

    Raises:
        InvalidBeamParamsError: A field is out of range or of the wrong type.
    """

    K: int
    prune_threshold: float = 0.0
    verbose: bool = False
    eos_byte_strings: Any = None
    heal: bool = True
    heal_max_backoff: int | None = None
    heal_max_splits: int | None = None
    eos_tokens: Any = None  # deprecated alias of eos_byte_strings

    def __post_init__(self) -> None:
        if self.eos_tokens is not None:
            if self.eos_byte_strings is not None:
                raise InvalidBeamParamsError(
                    "Cannot specify both 'eos_byte_strings' and the deprecated 'eos_tokens'."
                )
            warnings.warn(
                "'eos_tokens' is deprecated, use 'eos_byte_strings' instead.",
                DeprecationWarning,
                stacklevel=3,
            )
            self.eos_byte_strings, self.eos_tokens = self.eos_tokens, None
        if not is_integer(self.K) or self.K < 1:
            raise InvalidBeamParamsError(
                f"K (the beam width) must be an integer >= 1, got {self.K!r}"
            )
        self.K = int(self.K)
        thr = self.prune_threshold
        if isinstance(thr, bool) or not isinstance(thr, numbers.Real) or not 0 <= thr < 1:
            raise InvalidBeamParamsError(
                f"prune_threshold must be non-negative and below 1 (a probability share), "
                f"got {thr!r}; 0 disables threshold pruning"
            )
        for name in ("heal_max_backoff", "heal_max_splits"):
            value = getattr(self, name)
            if value is not None and (not is_integer(value) or value < 0):
                raise InvalidBeamParamsError(
                    f"{name} must be None (no limit) or an integer >= 0, got {value!r}"
                )
        self.eos_byte_strings = _byte_strings(self.eos_byte_strings)
        self.log_prune_threshold = math.log(thr) if thr > 0 else -math.inf


def _byte_strings(value: Any) -> set[bytes]:
    if not value:
        return set()
    if isinstance(value, bytes | str):
        raise InvalidBeamParamsError(
            f"eos_byte_strings must be a collection of byte strings, got the single "
            f"{type(value).__name__} {value!r}; wrap it: [{value!r}]"
        )
    out = set()
    for item in value:
        if not isinstance(item, bytes):
            hint = f"; encode it: {item.encode()!r}" if isinstance(item, str) else ""
            raise InvalidBeamParamsError(
                f"eos_byte_strings must hold bytes, got {type(item).__name__} {item!r}{hint}"
            )
        out.add(bytes(item))
    return out

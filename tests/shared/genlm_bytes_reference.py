"""genlm-bytes 0.2.0 as the reference of the agreement tests, over any model object.

genlm-bytes sums token probabilities into trie masses with float32 sparse products,
off by up to ~1e-4 relative (SmolLM2's first distribution: root mass 0.999921,
exactly 1.0000055); ours sum exactly to float32 precision. ``exact_sums()`` makes
genlm-bytes do its sums in float64, its algorithm untouched, so the two beams can be
compared to 1e-5; the stock reference is compared at the tolerance its own error
allows.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import genlm.bytes as theirs
import genlm.bytes.trie as their_trie
import numpy as np
import torch

import genlm_bytelm as ours

#: Texts the agreement tests read: English, code, multi-byte UTF-8 (2-4 byte characters).
TEXTS = {
    "english": b"The history of the city dates back to the Roman period.",
    "code": b"def fib(n):\n    return n if n < 2 else fib(n - 1)\n",
    "utf8": "Caf\u00e9 cr\u00e8me \u65e5\u672c\u8a9e \U0001f600 na\u00efve!".encode(),
}

_TRIES: dict[tuple[int, frozenset[bytes]], Any] = {}
#: The async wrapper of each trie for the event loop it was last used on.
_WRAPPERS: dict[tuple[int, frozenset[bytes]], tuple[asyncio.AbstractEventLoop, Any]] = {}


def _exact_batch_weight_sum(self: Any, ws: Any, mode: Any = None) -> torch.Tensor:
    mode = mode or their_trie.TrieMode.WITHOUT_EOS
    ws = self._preprocess_ws(ws).double()
    matrix = self.M_with_eos if mode == their_trie.TrieMode.WITH_EOS else self.M_no_eos
    return torch.sparse.mm(ws[:, self.token_ids], matrix.to(torch.float64))


@contextlib.contextmanager
def exact_sums() -> Iterator[None]:
    """genlm-bytes' trie sums in float64 (masses, then weights, become float64)."""
    original = their_trie.TokenByteTrie.batch_weight_sum
    their_trie.TokenByteTrie.batch_weight_sum = _exact_batch_weight_sum
    try:
        yield
    finally:
        their_trie.TokenByteTrie.batch_weight_sum = original


async def their_beam(llm: Any, params: Any) -> Any:
    """``theirs.ByteBeamState.initial`` with its (slow to build) trie made once per model.

    The trie is shared; its async wrapper is made once per event loop: genlm-bytes'
    wrapper keeps the batching task of the loop it first ran on and restarts it only
    once that task is done, which depends on whether the test runner cancelled it
    when it closed that loop (pytest-asyncio 0.24 does not: the next test's requests
    went to a closed loop).
    """
    key = (id(llm), frozenset(params.eos_byte_strings))
    if key not in _TRIES:
        _TRIES[key] = their_trie.TokenByteTrie(
            decode=llm.byte_vocab, eos_byte_strings=params.eos_byte_strings, device="cpu"
        )
    loop = asyncio.get_running_loop()
    if key not in _WRAPPERS or _WRAPPERS[key][0] is not loop:
        _WRAPPERS[key] = (loop, their_trie.AsyncTokenByteTrie(_TRIES[key]))
    trie = _WRAPPERS[key][1]
    state = theirs.LazyTrieState.initial(llm, trie, mode=their_trie.TrieMode.WITH_EOS)
    return theirs.ByteBeamState([await state.materialize()], params)


def params_pair(**kwargs: Any) -> tuple[Any, Any]:
    """The same BeamParams for both libraries."""
    return theirs.BeamParams(**kwargs), ours.BeamParams(**kwargs)


class Deviation(float):
    """The worst deviation, with where it was seen (shown when an assertion fails)."""

    where: str = "nowhere"

    def __repr__(self) -> str:
        return f"{float(self)!r} ({self.where})"


def _worse(worst: Deviation, value: float, where: str) -> Deviation:
    if value <= worst:
        return worst
    out = Deviation(value)
    out.where = where
    return out


async def max_deviation(llm: Any, text: bytes, cuts: int = 6, **kwargs: Any) -> Deviation:
    """Worst |difference| of next-byte log-probs after prefilling prefixes of ``text``.

    Also checks that both beams keep the same number of candidates and rule out the
    same bytes (``-inf`` in the same places), and that their weights agree. The
    result says at which prefix and byte (or weight) the worst difference was.
    """
    their_params, our_params = params_pair(**kwargs)
    t = await their_beam(llm, their_params)
    o = await ours.ByteBeamState.initial(llm, our_params)
    worst, done = Deviation(0.0), 0
    for i in sorted({len(text) * c // cuts for c in range(cuts + 1)}):
        # prefill(a) then prefill(b) is prefill(a + b) in both libraries
        t = await t.prefill(text[done:i])
        o = await o.prefill(text[done:i])
        done = i
        assert len(t) == len(o), (text[:i], len(t), len(o))
        if not len(o):
            continue
        tl, ol = (await t.logp_next()).ps, (await o.logp_next()).ps
        finite = np.isfinite(tl)
        assert np.array_equal(finite, np.isfinite(ol)), text[:i]
        gap = np.zeros(len(tl))
        gap[finite] = np.abs(tl[finite] - ol[finite])  # both -inf elsewhere
        j = int(np.argmax(gap))
        worst = _worse(
            worst,
            float(gap[j]),
            f"after {text[:i]!r}, next byte {j}: theirs {tl[j]!r}, ours {ol[j]!r}; "
            f"{len(o)} candidates",
        )
        tw = np.array([s.weight for s in t], dtype=np.float64)
        ow = np.array([s.weight for s in o])
        weights_gap = np.abs((tw - t.logZ) - (ow - o.logZ))
        worst = _worse(
            worst,
            float(weights_gap.max()),
            f"after {text[:i]!r}, candidate weights: theirs {(tw - t.logZ).tolist()}, "
            f"ours {(ow - o.logZ).tolist()}",
        )
    return worst

"""ExactByteState.prefill in windows on SmolLM2 (issue 27, point 1).

A text read in windows of a few bytes makes other model calls than one read whole
(several prefix forwards instead of one): the log-probabilities summed are the same
rows, computed in forwards of other shapes, so the results agree to float32 noise.
"""

from __future__ import annotations

import pytest

from genlm_bytelm import ExactByteState, log_likelihood
from genlm_bytelm.exact import prefill as exact_prefill

TEXT = b"The history of the city dates back to the Roman period, when a small settlement grew."


async def test_windows_agree_with_the_whole_text(smollm2, monkeypatch):
    whole = await log_likelihood(smollm2, TEXT)
    smollm2.clear_cache()
    monkeypatch.setattr(exact_prefill, "WINDOW_BYTES", 12)
    monkeypatch.setattr(exact_prefill, "LOOKAHEAD_BYTES", 0)
    windowed = await log_likelihood(smollm2, TEXT)
    assert windowed.logprob == pytest.approx(whole.logprob, abs=1e-4)
    state = await (await ExactByteState.initial(smollm2)).prefill(TEXT)
    assert state.logZ == pytest.approx(whole.logprob, abs=1e-4)

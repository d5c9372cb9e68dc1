"""``ExactByteState`` over an engine against the same weights in float64 (engine tests).

The exact byte-level LM uses nothing but the AsyncLM contract, so over any backend it
must give the byte distribution the float64 reference gives, to the backend's float32
precision: the same ``logZ`` after a prefill and the same next-byte log-probabilities
wherever they are not negligible.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torch_lm import Float64TorchLM

from genlm_bytelm import ExactByteState

#: Texts with a mid-word end, code, digits and multi-byte UTF-8.
TEXTS = (b"The capital of Fra", b"x = [1, 2]\n", "caf\u00e9 \u6771".encode())


def float64_reference(model_dir: str) -> Float64TorchLM:
    """The model in ``model_dir`` as a float64 transformers LM."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    return Float64TorchLM(model, AutoTokenizer.from_pretrained(model_dir))


async def assert_exact_bytes_agree(lm: Any, reference: Float64TorchLM, atol: float) -> None:
    """``logZ`` and next-byte log-probs (p > 1e-4) of ``lm`` within ``atol`` of the reference."""
    for data in TEXTS:
        ours = await (await ExactByteState.initial(lm)).prefill(data)
        ref = await (await ExactByteState.initial(reference)).prefill(data)
        assert abs(ours.logZ - ref.logZ) < atol, (data, ours.logZ, ref.logZ)
        a, b = (await ours.logp_next()).ps, (await ref.logp_next()).ps
        likely = np.exp(b) > 1e-4
        err = np.abs(a[likely] - b[likely]).max()
        assert err < atol, f"{data!r}: max |ours - float64| over likely next bytes = {err:.2e}"
        await ours.cleanup()
        await ref.cleanup()

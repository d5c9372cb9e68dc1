"""ExactByteState over vLLM: the byte distribution of the float64 reference, to 1e-3."""

from __future__ import annotations

from session_requires import require

require("vllm", reason="vLLM is not installed (nox -s vllm installs it)")

from exact_bytes_check import assert_exact_bytes_agree, float64_reference  # noqa: E402


async def test_exact_bytes_over_vllm_equal_the_float64_reference(engines, model_paths):
    lm = engines("smollm2").lm()
    await assert_exact_bytes_agree(lm, float64_reference(model_paths("smollm2")), atol=1e-3)
    lm.cleanup()

"""ExactByteState over SGLang (in process): the float64 reference's byte distribution, to 1e-3."""

from __future__ import annotations

from session_requires import require

require("sglang", reason="SGLang is not installed (nox -s sgl installs it)")

from exact_bytes_check import assert_exact_bytes_agree, float64_reference  # noqa: E402


async def test_exact_bytes_over_sglang_equal_the_float64_reference(make_lm, smollm2):
    lm = make_lm()
    await assert_exact_bytes_agree(lm, float64_reference(smollm2), atol=1e-3)

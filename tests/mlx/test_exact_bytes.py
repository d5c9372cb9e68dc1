"""ExactByteState over MLX: the byte distribution of the float64 reference, to 1e-3."""

from __future__ import annotations

import pytest
from session_requires import require

require("mlx_lm", reason="mlx and mlx-lm are not installed (nox -s mlx installs them)")

from exact_bytes_check import assert_exact_bytes_agree, float64_reference  # noqa: E402


@pytest.mark.parametrize("key", ["tiny-gpt2", "smollm2"])
async def test_exact_bytes_over_mlx_equal_the_float64_reference(mlx_models, key):
    loaded = mlx_models(key)
    with loaded.lm() as lm:
        await assert_exact_bytes_agree(lm, float64_reference(loaded.path), atol=1e-3)

"""genlm-mlx's AsyncMlxLM keeps genlm-backend 0.3.1's public methods, or documents them."""

from genlm_backend_api import NOT_KEPT, missing, public_methods
from session_requires import require

require("mlx_lm", reason="mlx and mlx-lm are not installed (nox -s mlx installs them)")

from genlm_mlx.lm import AsyncMlxLM  # noqa: E402


def test_every_method_is_kept_or_documented():
    assert missing("AsyncMlxLM", AsyncMlxLM) == set()


def test_what_is_not_kept_is_really_absent():
    for owner, method in NOT_KEPT:
        if owner == "AsyncMlxLM":
            assert method not in public_methods(AsyncMlxLM), method

"""genlm-hf's AsyncTransformer keeps genlm-backend 0.3.1's public methods, or documents them."""

from genlm_backend_api import NOT_KEPT, missing, public_methods
from session_requires import require

require("genlm_hf.lm", reason="genlm-hf is not installed (nox -s hf installs it)")

from genlm_hf.lm import AsyncTransformer  # noqa: E402


def test_every_method_is_kept_or_documented():
    assert missing("AsyncTransformer", AsyncTransformer) == set()


def test_what_is_not_kept_is_really_absent():
    for owner, method in NOT_KEPT:
        if owner == "AsyncTransformer":
            assert method not in public_methods(AsyncTransformer), method

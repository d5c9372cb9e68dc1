"""genlm-sgl's AsyncSGLTransformer keeps genlm-backend 0.3.1's public methods, or documents them."""

from genlm_backend_api import NOT_KEPT, missing, public_methods
from session_requires import require

require("sglang", reason="SGLang is not installed (nox -s sgl installs it)")

from genlm_sgl.lm import AsyncSGLTransformer  # noqa: E402


def test_every_method_is_kept_or_documented():
    assert missing("AsyncSGLTransformer", AsyncSGLTransformer) == set()


def test_what_is_not_kept_is_really_absent():
    for owner, method in NOT_KEPT:
        if owner == "AsyncSGLTransformer":
            assert method not in public_methods(AsyncSGLTransformer), method

"""genlm-vllm's AsyncVirtualLM keeps genlm-backend 0.3.1's public methods, or documents them."""

from genlm_backend_api import NOT_KEPT, missing, public_methods
from session_requires import require

require("vllm", reason="vLLM is not installed (nox -s vllm installs it)")

from genlm_vllm.lm import AsyncVirtualLM  # noqa: E402


def test_every_method_is_kept_or_documented():
    assert missing("AsyncVirtualLM", AsyncVirtualLM) == set()


def test_what_is_not_kept_is_really_absent():
    for owner, method in NOT_KEPT:
        if owner == "AsyncVirtualLM":
            assert method not in public_methods(AsyncVirtualLM), method

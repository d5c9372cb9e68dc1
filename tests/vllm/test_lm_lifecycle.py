"""Loading through the registry, engine shutdown, and the vLLM version gate."""

from __future__ import annotations

import pytest
from processes import engine_processes
from session_requires import require

require("vllm", reason="vLLM is not installed (nox -s vllm installs it)")


from genlm_core import load_model_by_name  # noqa: E402
from genlm_core.errors import InvalidArgumentError, ModelClosedError  # noqa: E402
from genlm_vllm import _compat  # noqa: E402
from genlm_vllm.errors import UnsupportedVLLMError  # noqa: E402
from genlm_vllm.lm import AsyncVirtualLM  # noqa: E402

#: torch warns about its own jit decorators when vLLM's dependencies import them.
pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"
)


async def test_load_by_name_then_cleanup_stops_the_engine(model_paths):
    before = engine_processes()
    lm = load_model_by_name(
        model_paths("tiny"),
        backend="vllm",
        llm_opts={"engine_opts": {"max_model_len": 256, "enforce_eager": True}},
    )
    assert isinstance(lm, AsyncVirtualLM) and lm.owns_engine
    assert lm.llm.llm_engine.model_config.dtype.__repr__() == "torch.float32"  # CPU default
    started = engine_processes() - before
    assert started, "vLLM started no engine process"
    async with lm:
        out = await lm.next_token_logprobs([1, 5, 6])
        assert out.shape == (len(lm.byte_vocab),)
    assert lm.closed and lm.llm is None
    assert not (engine_processes() & started), "engine processes survived cleanup()"
    lm.cleanup()  # idempotent
    with pytest.raises(ModelClosedError):
        await lm.next_token_logprobs([1, 5, 6])
    with pytest.raises(ModelClosedError):
        await lm.sample([1, 5], max_tokens=2, eos_token_ids=[])
    with pytest.raises(ModelClosedError):
        lm.add_new_lora("/nowhere", "x")


def test_from_name_refuses_partial_logprobs():
    with pytest.raises(InvalidArgumentError, match="max_logprobs=20"):
        AsyncVirtualLM.from_name("unused", engine_opts={"max_logprobs": 20})


@pytest.mark.parametrize("version", ["0.32.0", "0.32.5+cpu", "0.32.1rc1"])
def test_supported_versions(version, monkeypatch):
    monkeypatch.delenv(_compat.ALLOW_ENV, raising=False)
    _compat.check_version(version)


@pytest.mark.parametrize("version", ["0.26.0", "0.31.9", "0.33.0", "1.0.0"])
def test_unsupported_versions_name_the_range(version, monkeypatch):
    monkeypatch.delenv(_compat.ALLOW_ENV, raising=False)
    with pytest.raises(UnsupportedVLLMError) as info:
        _compat.check_version(version)
    assert f"vLLM {version} is installed" in str(info.value)
    assert "vllm>=0.32,<0.33" in str(info.value)
    monkeypatch.setenv(_compat.ALLOW_ENV, "1")
    _compat.check_version(version)

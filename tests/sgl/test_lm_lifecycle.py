"""Loading through the registry, engine start-up and shutdown, the SGLang version gate.

Start-up and shutdown run in a subprocess: SGLang keeps one engine configuration per
process, and the session's engine (conftest.py) holds this one's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from session_requires import require

require("sglang", reason="SGLang is not installed (nox -s sgl installs it)")

from genlm_core.errors import InvalidArgumentError, ModelClosedError  # noqa: E402
from genlm_sgl import _compat  # noqa: E402
from genlm_sgl.errors import EngineOutputError, UnsupportedSGLangError  # noqa: E402

LIFECYCLE = textwrap.dedent(
    """
    import asyncio, gc, json, sys, threading
    from genlm_core import load_model_by_name
    from genlm_core.errors import ModelClosedError
    from genlm_sgl.lm import AsyncSGLTransformer

    path = sys.argv[1]
    report = {}
    before = {t.ident for t in threading.enumerate()}
    opts = {"engine_opts": {"max_running_requests": 4}}
    lm = load_model_by_name(path, backend="sgl", llm_opts=opts)
    report["class"] = type(lm).__name__
    report["dtype"] = str(lm.engine.server_args.dtype)
    try:
        load_model_by_name(path, backend="sgl", llm_opts=opts)
    except Exception as exc:
        report["second"] = f"{type(exc).__name__}: {exc}"

    async def use():
        async with lm:
            return (await lm.next_token_logprobs([1, 5, 6])).shape[0]

    report["width"] = asyncio.run(use())
    lm.cleanup()  # idempotent
    try:
        lm.next_token_logprobs_sync([1, 5, 6])
    except ModelClosedError:
        report["closed"] = True
    gc.collect()
    report["threads"] = sorted(
        t.name for t in threading.enumerate()
        if t.ident not in before and t.name != "tqdm_monitor"  # tqdm's, from loading
    )
    again = AsyncSGLTransformer.from_name(path, engine_opts={"max_running_requests": 4})
    report["again"] = again.next_token_logprobs_sync([1, 5, 6]).shape[0]
    again.cleanup()
    if not again.engine.device.startswith("cuda"):
        try:
            lora = {"enable_lora": True, "max_lora_rank": 8, "lora_target_modules": ["q_proj"]}
            AsyncSGLTransformer.from_name(path, engine_opts=lora)
        except Exception as exc:
            report["lora_on_cpu"] = f"{type(exc).__name__}: {exc}"
    print("REPORT " + json.dumps(report))
    """
)


def test_load_use_cleanup_restart(smollm2):
    """Load by name, use, clean up (no thread left), start again; LoRA's CPU error."""
    result = subprocess.run(
        [sys.executable, "-c", LIFECYCLE, smollm2], capture_output=True, text=True, timeout=600
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("REPORT ")]
    assert result.returncode == 0 and lines, result.stderr[-3000:]
    report = json.loads(lines[-1][len("REPORT ") :])
    assert report["class"] == "AsyncSGLTransformer"
    assert report["width"] == report["again"] == 49152
    assert "an in-process SGLang scheduler is already running" in report["second"]
    assert report["closed"] is True
    assert report["threads"] == [], "threads left after cleanup()"
    if "lora_on_cpu" in report:  # the measured reason the LoRA tests need a GPU
        assert report["dtype"] == "float32"
        assert "ModelLoadError" in report["lora_on_cpu"]
        assert "pin_memory=True requires a CUDA" in report["lora_on_cpu"]


def test_server_started_used_and_stopped_leaves_no_process(new_server, tmp_path):
    """A server of its own on loopback: serve, clean up the client, stop every process."""
    from genlm_sgl.server import AsyncSGLServerLM

    server = new_server(str(tmp_path / "server.log"))
    try:
        pids = server.pids()
        assert len(pids) >= 2  # the HTTP server and its scheduler (and detokenizer)
        with AsyncSGLServerLM.from_url(server.url) as lm:
            assert lm.next_token_logprobs_sync([1, 5, 6]).shape == (len(lm.byte_vocab),)
        assert lm.closed and lm.client.http.is_closed
    finally:
        server.stop()
    import psutil

    alive = [pid for pid in pids if psutil.pid_exists(pid)]
    alive = [p for p in alive if psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"server processes left after stop: {alive}"


def test_wrapper_cleanup_keeps_shared_engine(make_lm):
    first, second = make_lm(), make_lm()
    first.cleanup()
    with pytest.raises(ModelClosedError):
        first.next_token_logprobs_sync([1, 2])
    assert second.next_token_logprobs_sync([1, 2]).shape == (len(second.byte_vocab),)


def test_lora_needs_an_engine_started_with_it(make_lm, engine, tmp_path):
    if engine.lora_enabled:
        pytest.skip("the session engine has LoRA enabled (GPU); this checks the refusal")
    with pytest.raises(InvalidArgumentError, match="enable_lora"):
        make_lm().add_new_lora(str(tmp_path), "x")


def test_only_one_engine_per_process(engine, smollm2):
    from genlm_sgl.lm import start_engine

    with pytest.raises(EngineOutputError, match="already running in this process"):
        start_engine(smollm2)


def test_prompt_longer_than_the_context_names_the_limit(make_lm, engine):
    lm = make_lm()
    with pytest.raises(ValueError, match=str(engine.max_input_len)):
        lm.next_token_logprobs_sync([1] * (engine.max_input_len + 1))


@pytest.mark.parametrize("version", ["0.5.23", "0.5.23.post1", "0.5.23rc0+cpu"])
def test_supported_versions(version, monkeypatch):
    monkeypatch.delenv(_compat.ALLOW_ENV, raising=False)
    _compat.check_version(version)


@pytest.mark.parametrize("version", ["0.5.17", "0.5.22", "0.5.24", "0.6.0", "1.0"])
def test_unsupported_versions_name_the_range(version, monkeypatch):
    monkeypatch.delenv(_compat.ALLOW_ENV, raising=False)
    with pytest.raises(UnsupportedSGLangError) as info:
        _compat.check_version(version)
    assert f"SGLang {version} is installed" in str(info.value)
    assert "sglang>=0.5.23,<0.5.24" in str(info.value)
    monkeypatch.setenv(_compat.ALLOW_ENV, "1")
    _compat.check_version(version)


def test_scheduler_check_names_missing_pieces():
    class Partial:
        def process_input_requests(self):
            pass

    with pytest.raises(UnsupportedSGLangError, match="get_next_batch_to_run"):
        _compat.check_scheduler(Partial())


def test_wrong_cpu_engine_setting_after_import_is_refused(monkeypatch):
    monkeypatch.setenv(_compat.CPU_ENGINE_ENV, "1")
    with pytest.raises(UnsupportedSGLangError, match="SGLANG_USE_CPU_ENGINE=0"):
        _compat.prepare_import("cuda")


def test_a_missing_model_directory_fails_before_any_engine_starts(tmp_path, monkeypatch):
    from genlm_core.errors import ModelNotFoundError
    from genlm_sgl import lm as sgl_lm

    def no_engine(*args, **kwargs):
        raise AssertionError("the engine must not start for a model that does not exist")

    monkeypatch.setattr(sgl_lm, "start_engine", no_engine)
    with pytest.raises(ModelNotFoundError, match="no such directory"):
        sgl_lm.AsyncSGLTransformer.from_name(str(tmp_path / "nowhere"))

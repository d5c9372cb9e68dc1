"""AsyncVirtualLM: a vLLM engine behind genlm-core's AsyncLM contract.

Concurrent ``next_token_logprobs`` calls are coalesced by genlm-core's AutoBatcher
(deduplicated, output-cached); each batch goes to the engine as one set of
``max_tokens=1, logprobs=-1`` requests, which vLLM schedules with its continuous
batching and prefix cache. Each computed context stays live in the engine (a resumable
request, `genlm_vllm._streaming`): a call extending it by one token sends only
that token. Rows are collected by request id, so a batch larger than
the engine's ``max_num_seqs`` (vLLM then runs it over several steps) comes back
complete and in order; see `genlm_vllm._engine`. ``sample``/``batch_sample`` use
vLLM's own sampler. LoRA adapters: genlm-core keeps the table of versions; each version
gets an engine id from a process-wide counter, never reused, so a replaced or removed
adapter's cached weights are never served again.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from genlm_backend_kit import EngineLM
from genlm_core.errors import InvalidArgumentError, InvalidTokenIdsError
from genlm_core.lm import (
    LoraAdapter,
    Request,
    sampling_args,
)
from genlm_vllm._compat import check_version, shutdown_engine
from genlm_vllm._engine import EngineRunner
from genlm_vllm._streaming import LiveRunner
from genlm_vllm.errors import ModelLoadError

__all__ = ["CPU_KV_CACHE_BYTES", "DEFAULT_ENGINE_OPTS", "VLLM_TEMPERATURES", "AsyncVirtualLM"]

#: Engine options [`AsyncVirtualLM.from_name`][] sets unless ``engine_opts`` overrides them.
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

log = logging.getLogger(__name__)


class AsyncVirtualLM(EngineLM):
    """Asynchronous, batched next-token log-probs and sampling from a vLLM engine.

    Args:
        llm: A ``vllm.LLM`` created with ``max_logprobs=-1`` (``from_name`` does this).
        batch_size: Most distinct requests handed to the engine at once (default 256;
            vLLM still runs at most ``max_num_seqs`` per step).
        live_contexts: Keep each computed context live in the engine so that a call
            extending it by one token computes that token only (default True; see
            `genlm_vllm._streaming`). False: every call is a new engine request
            and only vLLM's prefix cache (whole KV blocks) is reused.
        max_wait: Seconds a batch may wait for more callers (default 0).
        **kwargs: ``owns_engine`` (see [`EngineLM`][genlm_backend_kit.EngineLM]) and the
            cache and batching options of [`BatchedAsyncLM`][genlm_core.lm.BatchedAsyncLM].

    Raises:
        InvalidArgumentError: The engine cannot return full-vocabulary log-probs.
    """

    def __init__(
        self,
        llm: Any,
        batch_size: int | None = None,
        max_wait: float | None = None,
        live_contexts: bool = True,
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
            vocab_size=width,
            **kwargs,
        )
        self.llm = llm
        self.max_model_len = int(config.max_model_len)
        self._lora_enabled_at_start = engine.vllm_config.lora_config is not None
        self._runner = EngineRunner(engine, width)
        self._live = LiveRunner.of(engine, width) if live_contexts else None

    @classmethod
    def engine_options(cls, engine_opts: dict[str, Any]) -> dict[str, Any]:
        """``vllm.LLM``'s keyword arguments: ``engine_opts`` over `DEFAULT_ENGINE_OPTS`.

        ``engine_opts`` are ``vllm.EngineArgs`` (``tensor_parallel_size``,
        ``pipeline_parallel_size``, ``distributed_executor_backend="ray"``,
        ``max_num_seqs``, ``enable_lora``, ...). On a CPU build of vLLM the default dtype
        is float32 (half precision is slow and inexact on CPUs) and the KV cache gets
        `CPU_KV_CACHE_BYTES` unless ``VLLM_CPU_KVCACHE_SPACE`` or ``engine_opts``
        size it.

        Raises:
            InvalidArgumentError: ``engine_opts`` sets ``max_logprobs`` to anything but -1.
        """
        opts = dict(DEFAULT_ENGINE_OPTS)
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
        return opts

    @classmethod
    def start_engine(cls, model_name: str, engine_opts: dict[str, Any]) -> Any:
        """Start a ``vllm.LLM`` for ``model_name`` with [`engine_options`][].

        Raises:
            ModelLoadError: vLLM could not start the engine.
        """
        import vllm

        check_version(vllm.__version__)
        try:
            return vllm.LLM(model=model_name, **engine_opts)
        except Exception as exc:
            raise ModelLoadError(
                f"vLLM could not start an engine for {model_name!r} with options "
                f"{engine_opts!r}: {type(exc).__name__}: {exc}"
            ) from exc

    @staticmethod
    def stop_engine(engine: Any) -> None:
        """Shut a ``vllm.LLM`` down."""
        shutdown_engine(engine.llm_engine)

    # -- log-probs ----------------------------------------------------------------------

    def compute_batch(self, requests: list[Request]) -> list[torch.Tensor]:
        """Log-probs of distinct requests: one engine run, rows matched by request id."""
        # No guard of its own: once cleanup() has begun the core starts no batch.
        runner = self._live if self._live is not None else self._runner
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

        Temperatures outside vLLM's range (`VLLM_TEMPERATURES`) are sampled by the
        base class instead, token by token from
        [`next_token_logprobs`][genlm_core.lm.AsyncLMBase.next_token_logprobs].
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
            raise self._closed_error()
        outs = await asyncio.to_thread(runner.generate, jobs)
        return [_strip_eos(tokens, eos) for tokens in outs]

    # -- the engine (EngineLM's hooks) ---------------------------------------------------

    backend_name = "vllm"
    engine_name = "vLLM"
    lora_hint = (
        "start it with engine_opts={'enable_lora': True, 'max_lora_rank': <your adapters' rank>}"
    )

    def engine_lock(self) -> Any:
        """The engine's lock (the base class's hook)."""
        return self._runner.lock

    def engine_has_lora(self) -> bool:
        """Whether the engine was started with LoRA support (the base class's hook)."""
        return self._lora_enabled_at_start

    def load_into_engine(self, adapter: LoraAdapter) -> Any:
        """Add an adapter version under a process-unique engine id; return its request.

        Raises:
            ModelLoadError: vLLM could not load the adapter.
        """
        from vllm.lora.request import LoRARequest

        request = LoRARequest(adapter.engine_name, next(_LORA_IDS), adapter.path)
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

    def unload_from_engine(self, handle: Any) -> None:
        """Unload an adapter version from the engine (the base class's hook)."""
        live = LiveRunner.existing(self._runner.engine)
        if live is not None:  # its live contexts hold the adapter's rows
            live.release([handle.lora_int_id])
        self._runner.engine.remove_lora(handle.lora_int_id)

    def _release(self) -> None:
        # Parked live requests keep request slots: on an engine that outlives this
        # wrapper, vLLM's own generate() would wait for them forever. Released first,
        # while the engine still runs (the core starts no batch of this wrapper now; a
        # batch of another wrapper holds the engine's lock, which release() waits for).
        # Every live context of the engine goes, this wrapper's or not (it may have
        # live_contexts=False): the others' next calls are new requests. A release that
        # fails is logged, not raised: the engine must still be stopped or left.
        try:
            live = LiveRunner.existing(self._runner.engine)
            if live is not None:
                live.release()
        except Exception as exc:  # noqa: BLE001 - reported; cleanup goes on
            log.warning(
                "%s.cleanup: the live contexts could not be released (%s: %s)",
                type(self).__name__,
                type(exc).__name__,
                exc,
            )
        finally:
            super()._release()

    def close_engine(self) -> None:
        """Stop the engine and free what it holds (the base class's hook)."""
        shutdown_engine(self._runner.engine)

    def _drop_engine(self) -> None:
        self.llm = self._runner = self._live = None  # type: ignore[assignment]

    # -- genlm-backend 0.3.1 compatibility ------------------------------------------------

    async def release_all(self) -> None:
        """Release every live context of the engine (their KV blocks and request slots).

        As genlm-backend's: call it at the end of an inference run. Nothing is lost:
        a released context's next call is a new engine request.
        """
        runner = self._runner
        live = None if runner is None else LiveRunner.existing(runner.engine)
        if live is not None:
            await asyncio.to_thread(live.release)


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

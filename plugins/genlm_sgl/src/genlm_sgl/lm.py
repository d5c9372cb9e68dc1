"""AsyncSGLTransformer: an in-process SGLang scheduler behind genlm-core's AsyncLM contract.

Concurrent ``next_token_logprobs`` calls are coalesced by genlm-core's AutoBatcher
(deduplicated, output-cached); each batch goes to SGLang's scheduler as prefill-only
requests, which it plans with its continuous batching, chunked prefill and radix
prefix cache. Rows are collected by request id (see `genlm_sgl._runner`), so a
batch larger than ``max_running_requests`` comes back complete and in order.
LoRA adapters are served per request through SGLang's multi-LoRA support; genlm-core
keeps the table of versions and each version gets a fresh SGLang id, so a replaced
adapter's cached prefixes are never reused.
``sample``/``batch_sample`` draw token by token from the exact log-probs (genlm-core's
sampler), each step a prefix-cache hit. [`AsyncSGLTransformer.from_url`][] drives an
SGLang server instead (`genlm_sgl.server`).
"""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple

import torch

from genlm_backend_kit import EngineLM
from genlm_core.lm import (
    LoraAdapter,
    Request,
)
from genlm_sgl._compat import InProcessScheduler, prepare_import
from genlm_sgl._runner import SchedulerRunner
from genlm_sgl.errors import EngineOutputError, ModelLoadError, UnsupportedSGLangError

__all__ = ["CPU_ENGINE_OPTS", "DEFAULT_ENGINE_OPTS", "AsyncSGLTransformer", "start_engine"]

#: Options of SGLang's ``ServerArgs`` that [`AsyncSGLTransformer.from_name`][] sets
#: unless ``engine_opts`` overrides them.
DEFAULT_ENGINE_OPTS: dict[str, Any] = {
    "skip_tokenizer_init": True,  # genlm-core tokenizes; the scheduler needs none
    "disable_overlap_schedule": True,  # batches are stepped one at a time, here
    "log_level": "warning",
}

#: Added on machines without an NVIDIA GPU: SGLang's torch-native CPU path, exact fp32,
#: and a KV cache of a fixed size (SGLang would otherwise size it from free memory).
CPU_ENGINE_OPTS: dict[str, Any] = {
    "device": "cpu",
    "attention_backend": "torch_native",
    "sampling_backend": "pytorch",
    "dtype": "float32",
    "max_total_tokens": 16384,
    "mem_fraction_static": 0.5,  # an upper bound; max_total_tokens sizes the pool
}


def start_engine(model_name: str, engine_opts: dict[str, Any] | None = None) -> Any:
    """Start an in-process SGLang scheduler for ``model_name`` (hub id or local directory).

    Args:
        model_name: SGLang's ``model_path``.
        engine_opts: ``ServerArgs`` options over `DEFAULT_ENGINE_OPTS` (and
            `CPU_ENGINE_OPTS` without an NVIDIA GPU).

    Returns:
        An `InProcessScheduler`, for [`AsyncSGLTransformer`][].

    Raises:
        UnsupportedSGLangError: SGLang is missing, unsupported, or cannot import here.
        ModelLoadError: SGLang could not start the engine.
    """
    from genlm_core.plugins.probes import nvidia_gpu_count

    opts = dict(DEFAULT_ENGINE_OPTS)
    if not nvidia_gpu_count()[0] or (engine_opts or {}).get("device") == "cpu":
        opts.update(CPU_ENGINE_OPTS)
    opts.update(engine_opts or {})
    opts["model_path"] = model_name
    prepare_import(str(opts.get("device") or "cuda"))
    try:
        import sglang  # noqa: F401
    except ImportError as exc:
        raise UnsupportedSGLangError(
            f"sglang could not be imported ({type(exc).__name__}: {exc}); install it with "
            f"pip install 'genlm-sgl[cuda]' on an NVIDIA GPU machine, or follow the CPU "
            f"recipe in genlm-sgl's README"
        ) from exc
    try:
        return InProcessScheduler(opts)
    except (UnsupportedSGLangError, EngineOutputError):
        raise
    except Exception as exc:
        raise ModelLoadError(
            f"SGLang could not start a scheduler for {model_name!r} with options {opts!r}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


class AsyncSGLTransformer(EngineLM):
    """Asynchronous, batched next-token log-probs from an in-process SGLang scheduler.

    Args:
        engine: A scheduler from [`start_engine`][] (``from_name`` starts one).
        tokenizer: The model's Hugging Face tokenizer (default: loaded from the
            engine's ``tokenizer_path``).
        batch_size: Most distinct requests handed to the scheduler at once (default 256;
            SGLang still runs at most ``max_running_requests`` per step).
        max_wait: Seconds a batch may wait for more callers (default 0).
        **kwargs: ``owns_engine`` (see [`EngineLM`][genlm_backend_kit.EngineLM]) and the
            cache and batching options of [`BatchedAsyncLM`][genlm_core.lm.BatchedAsyncLM].
    """

    def __init__(
        self,
        engine: Any,
        tokenizer: Any = None,
        batch_size: int | None = None,
        max_wait: float | None = None,
        **kwargs: Any,
    ) -> None:
        if tokenizer is None:
            tokenizer = _load_tokenizer(engine.server_args)
        super().__init__(
            tokenizer,
            batch_size=batch_size,
            max_wait=max_wait,
            vocab_size=engine.vocab_size,
            **kwargs,
        )
        self.engine = engine
        self.max_positions = engine.max_input_len
        self._runner: SchedulerRunner | None = SchedulerRunner(engine, engine.vocab_size)

    @classmethod
    def start_engine(cls, model_name: str, engine_opts: dict[str, Any]) -> Any:
        """Start an in-process SGLang scheduler (``from_name`` calls it; see [`start_engine`][]).

        ``engine_opts`` are keyword arguments of SGLang's ``ServerArgs``, over
        `DEFAULT_ENGINE_OPTS` (plus `CPU_ENGINE_OPTS` on a machine without an
        NVIDIA GPU); e.g. ``max_running_requests``, ``chunked_prefill_size``,
        ``enable_lora``, ``max_lora_rank``, ``lora_target_modules``, ``lora_backend``,
        ``tp_size``.
        """
        return start_engine(model_name, engine_opts)

    @staticmethod
    def stop_engine(engine: Any) -> None:
        """Shut a scheduler down."""
        engine.shutdown()

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> Any:
        """An AsyncLM over a running SGLang server or router (see `genlm_sgl.server`)."""
        from genlm_sgl.server import AsyncSGLServerLM

        return AsyncSGLServerLM.from_url(url, **kwargs)

    # -- log-probs ----------------------------------------------------------------------

    def compute_batch(self, requests: list[Request]) -> list[torch.Tensor]:
        """Log-probs of distinct requests: one scheduler run, rows matched by request id."""
        # No guard of its own: once cleanup() has begun the core starts no batch.
        prompts = [(req.token_ids, _lora_id(self.adapter_handle(req))) for req in requests]
        return self._runner.logprobs(prompts, self.row_pool.empty_rows)

    def clear_cache(self) -> None:
        """Drop cached outputs and flush SGLang's radix prefix cache."""
        super().clear_cache()
        self.clear_kv_cache()

    # -- the engine (EngineLM's hooks) ---------------------------------------------------

    backend_name = "sgl"
    engine_name = "SGLang"
    lora_hint = (
        "start it with engine_opts={'enable_lora': True, 'max_lora_rank': <your adapters' "
        "rank>, 'lora_target_modules': [...]}"
    )

    def engine_lock(self) -> Any:
        """The engine's lock (the base class's hook)."""
        return self.engine.lock

    def engine_has_lora(self) -> bool:
        """Whether the engine was started with LoRA support (the base class's hook)."""
        return bool(self.engine.lora_enabled)

    def load_into_engine(self, adapter: LoraAdapter) -> Adapter:
        """Load an adapter version under a name unique to this engine.

        Raises:
            ModelLoadError: SGLang could not load the adapter.
        """
        engine_name = f"{adapter.engine_name}-{uuid.uuid4().hex[:12]}"  # unique per engine
        try:
            lora_id = self.engine.load_lora(engine_name, adapter.path)
        except Exception as exc:
            raise ModelLoadError(
                f"SGLang could not load LoRA adapter {adapter.name!r} from "
                f"{adapter.path!r}: {type(exc).__name__}: {exc}. Pass a directory saved "
                f"by peft's save_pretrained for this base model, within the engine's "
                f"max_lora_rank and lora_target_modules"
            ) from exc
        return Adapter(lora_id, engine_name)

    def unload_from_engine(self, handle: Adapter) -> None:
        """Unload an adapter version from the engine (the base class's hook)."""
        self.engine.unload_lora(handle.engine_name, handle.lora_id)

    def close_engine(self) -> None:
        """Stop the engine and free what it holds (the base class's hook)."""
        self.engine.shutdown()

    def _drop_engine(self) -> None:
        self._runner = None

    # -- lifecycle ------------------------------------------------------------------------

    def init_worker_thread(self) -> None:
        """Make the engine's GPU current in the worker thread (CUDA keeps it per thread)."""
        if self.engine.device.startswith("cuda"):
            torch.cuda.set_device(0)

    # -- genlm-backend 0.3.1 compatibility ------------------------------------------------

    def clear_kv_cache(self) -> None:
        """Flush SGLang's radix prefix cache only, keeping the cached outputs."""
        runner = self._runner
        if runner is not None and not self.closed:
            with runner.lock:
                runner.scheduler.flush()


# -- helpers -------------------------------------------------------------------------------


class Adapter(NamedTuple):
    """A loaded adapter: SGLang's id for it, and its name in the engine.

    SGLang names adapters per engine; several wrappers of one engine may use the same
    name, so each load is registered under a unique engine-side name.
    """

    lora_id: str
    engine_name: str


def _lora_id(handle: Adapter | None) -> str | None:
    return None if handle is None else handle.lora_id


def _load_tokenizer(server_args: Any) -> Any:
    from transformers import AutoTokenizer

    path = server_args.tokenizer_path or server_args.model_path
    try:
        return AutoTokenizer.from_pretrained(
            path, trust_remote_code=bool(getattr(server_args, "trust_remote_code", False))
        )
    except Exception as exc:
        raise ModelLoadError(
            f"could not load the tokenizer of {path!r}: {type(exc).__name__}: {exc}; pass "
            f"tokenizer= explicitly"
        ) from exc

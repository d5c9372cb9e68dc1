"""AsyncTransformer: a Hugging Face causal LM behind genlm-core's AsyncLM contract.

What makes it fast, compared with genlm-backend 0.3.1's class of the same name:

* **Prefix K/V reuse.** Every forward stores the keys and values it computed in a
  :class:`~genlm_hf.kvcache.PrefixKVCache`; a later request runs the model only on
  the tokens after its longest cached prefix. A sampler's step is one token per
  particle, not its whole context again.
* **One forward per batch.** The AutoBatcher hands over the distinct concurrent
  requests; their new tokens run as one padded forward with the cached pasts
  assembled into one buffer (see :mod:`genlm_hf._forward`), and logits are computed
  only at each row's last position.
* **Faster linear layers on CPUs.** Float32 linear layers (and the output
  projection, in cache-sized blocks) run through oneDNN rather than torch's BLAS
  (MKL), about twice as fast on the AMD CPU measured (see :mod:`genlm_hf._linear`).
* **No autograd.** Forwards run under ``torch.no_grad()`` (not ``inference_mode``: its
  tensors refuse in-place updates outside it, and callers do mask log-probs in place).
* **Bounded memory.** K/V tensors and cached log-probs each live under a byte budget
  with least-recently-used eviction; genlm-backend's trie grows without limit.

LoRA adapters (peft, through transformers' integration) are selected per request;
requests are grouped per adapter version, and each version has its own prefix tree
(genlm-core keeps the adapter table; this class implements its load/unload hooks).
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import os
from collections.abc import Callable, Sequence
from typing import Any

import torch

from genlm_core._validation import is_int_at_least
from genlm_core.backend_kit import plan_groups, shared_prefixes
from genlm_core.errors import ModelClosedError
from genlm_core.lm import BatchedAsyncLM, GenlmBackendCompat, LoraAdapter, Request
from genlm_core.loading import resolve_model_name
from genlm_hf._forward import (
    KVLayout,
    Row,
    Workspace,
    accepts_logits_to_keep,
    log_softmax_rows,
    probe_layout,
    run_group,
)
from genlm_hf._linear import resolve_linear_kernel
from genlm_hf._threads import auto_worker_threads, set_thread_torch_threads
from genlm_hf.errors import MissingDependencyError, ModelLoadError
from genlm_hf.kvcache import KVCacheStats, PrefixKVCache
from genlm_hf.prefixes import PrefixForwards

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_KV_CACHE_BYTES",
    "AsyncTransformer",
]

#: Default budget of cached key/value tensors (bytes).
DEFAULT_KV_CACHE_BYTES = 1 << 30
#: Default budget of cached log-probability vectors (bytes).
DEFAULT_CACHE_BYTES = 256 << 20
#: Default cap on one forward's K/V buffer (bytes); bigger batches are split.
DEFAULT_MAX_BATCH_KV_BYTES = 256 << 20

#: Fewest uncached tokens several prompts of a batch must share to get computed once first.
MIN_SHARED = 16

_UNKNOWN = object()  # adapter state after loading/unloading one: re-apply on next use


def split_kv_budget(kv_cache_bytes: int, max_batch_kv_bytes: int) -> tuple[int, int]:
    """Split ``kv_cache_bytes`` into (reused forward K/V buffer, working-memory reserve).

    The prefix cache gets the rest. The reserve (a quarter of the budget, at most
    64 MiB) stands for what a forward allocates besides keys and values: logits,
    log-probs, activations, and allocator slack between heap trims. Measured on
    SmolLM2 with 32-row batches, that is ~35 MiB at peak plus ~17 MiB of bookkeeping;
    without the reserve a 256 MiB budget peaked ~35 MiB above it.
    """
    keep = min(max_batch_kv_bytes, 64 << 20, kv_cache_bytes // 4)
    reserve = min(64 << 20, kv_cache_bytes // 4)
    return keep, reserve


class AsyncTransformer(GenlmBackendCompat, PrefixForwards, BatchedAsyncLM):
    """Asynchronous, autobatched, prefix-cached wrapper of a transformers causal LM.

    Args:
        hf_model: A ``transformers`` causal LM (``AutoModelForCausalLM``).
        hf_tokenizer: Its tokenizer.
        batch_size: Most distinct requests the batcher gathers into one call.
        max_wait: Seconds a batch may wait for more callers (default 0: dispatch as
            soon as the event loop has no runnable callers left).
        cache_size: Most cached log-probability vectors (0 disables that cache).
        cache_bytes: Byte budget of cached log-probability vectors.
        kv_cache_bytes: Byte budget of the model's working memory beyond its weights and
            cached log-probs: the forward's reused K/V buffer and a reserve for its
            other working memory (each a quarter of the budget, 64 MiB at most; see
            :func:`split_kv_budget`), and the prefix cache's slot pool (the rest).
            0 disables prefix reuse: every request then runs its whole prompt.
        max_batch_kv_bytes: Cap on one forward's key/value buffer; larger batches are
            split into several forwards.
        worker_threads: Torch threads of the batcher's worker thread, which runs the
            forwards (no other thread's setting changes). None: 1 for a CPU model of
            fewer than 20M parameters, whose operations are too small to gain from
            threads while a second multi-threaded torch thread slows the caller's own
            torch work (see :mod:`genlm_hf._threads`); torch's setting otherwise.
        linear_kernel: How the cached forwards compute float32 linear layers on a CPU.
            ``"auto"`` (default): through oneDNN when this torch has it, about twice
            as fast as torch's BLAS on the AMD CPU measured (see
            :mod:`genlm_hf._linear`); ``"onednn"``: the same, an error where it
            cannot run; ``"torch"``: torch's own path. GPU and half-precision models
            always use torch's. The resolved choice is :attr:`linear_kernel`.
        **kwargs: Passed to :class:`~genlm_core.lm.BatchedAsyncLM` (e.g. ``byte_vocab``,
            ``trim_heap``, or ``timeout``, genlm-backend's name for ``max_wait``).
    """

    #: Measured: without trims, a 5,000-call sampler run on SmolLM2 kept ~100 MiB of
    #: freed forward buffers resident above the cache budgets (genlm_core.runtime.HeapTrimmer).
    trims_heap_by_default = True

    def __init__(
        self,
        hf_model: Any,
        hf_tokenizer: Any,
        batch_size: int = 64,
        max_wait: float | None = None,
        *,
        cache_size: int = 4096,
        cache_bytes: int | None = DEFAULT_CACHE_BYTES,
        kv_cache_bytes: int = DEFAULT_KV_CACHE_BYTES,
        max_batch_kv_bytes: int = DEFAULT_MAX_BATCH_KV_BYTES,
        worker_threads: int | None = None,
        linear_kernel: str = "auto",
        **kwargs: Any,
    ) -> None:
        for name, value in (
            ("kv_cache_bytes", kv_cache_bytes),
            ("max_batch_kv_bytes", max_batch_kv_bytes),
        ):
            if not is_int_at_least(value, 0):
                raise ValueError(f"{name} must be an integer >= 0 (bytes), got {value!r}")
        if worker_threads is not None and not is_int_at_least(worker_threads, 1):
            raise ValueError(
                f"worker_threads must be an integer >= 1, or None for automatic, "
                f"got {worker_threads!r}"
            )
        device = torch.device(getattr(hf_model, "device", "cpu"))
        dtype = getattr(hf_model, "dtype", torch.float32)  # transformers: its weights' dtype
        self.linear_kernel = resolve_linear_kernel(linear_kernel, device, dtype)
        hf_model.eval()
        width = _logits_width(hf_model)
        super().__init__(
            hf_tokenizer,
            batch_size=batch_size,
            max_wait=max_wait,
            cache_size=cache_size,
            cache_bytes=cache_bytes,
            vocab_size=width,
            **kwargs,
        )
        self.model = hf_model
        self.device = device
        self.max_batch_kv_bytes = int(max_batch_kv_bytes)
        self.worker_threads = (
            worker_threads if worker_threads is not None else auto_worker_threads(hf_model, device)
        )
        # A single-threaded worker gets a second plain thread for a batch's two big ops.
        self._helper: concurrent.futures.ThreadPoolExecutor | None = None
        if self.worker_threads == 1 and _usable_cpus() > 1:
            self._helper = concurrent.futures.ThreadPoolExecutor(
                1,
                thread_name_prefix="genlm-hf-helper",
                initializer=set_thread_torch_threads,
                initargs=(1,),
            )
        self._active: object = None  # adapter (peft name) currently enabled on the model
        self._keep_kwarg = accepts_logits_to_keep(hf_model)
        self.max_positions = _max_positions(hf_model)
        # The budget covers the forward's reused K/V buffer, a reserve for the rest of a
        # forward's working memory, and the prefix cache (what is left).
        keep, reserve = split_kv_budget(kv_cache_bytes, self.max_batch_kv_bytes)
        self._workspace = Workspace(keep_bytes=keep)
        # Logits and log-probs of a batch: reused buffers, inside the working reserve.
        self._logits_workspace = Workspace(keep_bytes=reserve // 4)
        self._logprobs_workspace = Workspace(keep_bytes=reserve // 4)
        self.kv_cache = PrefixKVCache(kv_cache_bytes - keep - reserve)
        self._layout: KVLayout | None = None
        self.kv_reuse_off_reason = "kv_cache_bytes=0"
        if kv_cache_bytes > 0:
            self._layout, self.kv_reuse_off_reason = probe_layout(hf_model)

    # -- loading ----------------------------------------------------------------------

    @classmethod
    def from_name(
        cls,
        model_id: str,
        bitsandbytes_opts: dict[str, Any] | None = None,
        hf_opts: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> AsyncTransformer:
        """Load a model and its tokenizer from a hub id or a local directory.

        On a CPU-only machine the weights load as float32 (half precision is slow and
        inexact on CPUs); with CUDA, in the checkpoint's dtype on ``device_map="auto"``.

        Args:
            model_id: Hub id (``"HuggingFaceTB/SmolLM2-135M-Instruct"``), local directory,
                or an embedded model's name (``"smollm2-135m-instruct"``: no hub needed).
            bitsandbytes_opts: Options of ``transformers.BitsAndBytesConfig``
                (e.g. ``{"load_in_4bit": True}``); needs bitsandbytes and, mostly, CUDA.
            hf_opts: Extra keyword arguments of ``AutoModelForCausalLM.from_pretrained``;
                they override the defaults above.
            **kwargs: Passed to :class:`AsyncTransformer`.

        Raises:
            ModelNotFoundError: No such directory, or a hub id that cannot load here
                (offline, hub unreachable, unknown); says what to do instead.
            ModelLoadError: The tokenizer or the model cannot be loaded.
            MissingDependencyError: ``bitsandbytes_opts`` given without bitsandbytes.
        """
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model_id = resolve_model_name(model_id)  # an embedded model's dir; fails fast offline
        opts: dict[str, Any] = {}
        if torch.cuda.is_available():
            opts.update(dtype="auto", device_map="auto")
        else:
            opts.update(dtype=torch.float32)
        if bitsandbytes_opts:
            if importlib.util.find_spec("bitsandbytes") is None:
                raise MissingDependencyError(
                    f"bitsandbytes_opts={bitsandbytes_opts!r} needs bitsandbytes, which is not "
                    f"installed: pip install 'genlm-hf[bitsandbytes]'"
                )
            from transformers import BitsAndBytesConfig

            opts["quantization_config"] = BitsAndBytesConfig(**bitsandbytes_opts)
        if hf_opts:
            opts.update(hf_opts)
            if "torch_dtype" in hf_opts:  # transformers 5 renamed it
                opts["dtype"] = opts.pop("torch_dtype")
        tokenizer = _load("tokenizer", model_id, AutoTokenizer.from_pretrained)
        model = _load("model", model_id, AutoModelForCausalLM.from_pretrained, **opts)
        return cls(model, tokenizer, **kwargs)

    # -- the batch computation ----------------------------------------------------------

    def init_worker_thread(self) -> None:
        """Give the model's worker thread :attr:`worker_threads` torch threads."""
        if self.worker_threads is not None:
            set_thread_torch_threads(self.worker_threads)

    def compute_batch(self, requests: list[Request]) -> list[torch.Tensor]:
        """Log-probs for distinct requests: per adapter, cached pasts + batched forwards."""
        return self._per_adapter(requests, self._compute_requests)

    def _per_adapter(
        self, requests: Sequence[Any], compute: Callable[[str | None, list[Any]], list[Any]]
    ) -> list[Any]:
        """``compute(adapter, its requests)`` per adapter version, in request order.

        ``adapter`` is the version's peft name (None: the base model), which also keys
        its prefix tree. The core runs one computation at a time and trims the heap.
        """
        with torch.no_grad():
            if self.model is None:
                raise ModelClosedError(f"{type(self).__name__} was cleaned up")
            by_adapter: dict[str | None, list[Any]] = {}
            for req in requests:
                by_adapter.setdefault(self.adapter_handle(req), []).append(req)
            results: dict[Any, Any] = {}
            for adapter, reqs in by_adapter.items():
                self._activate(adapter)
                results.update(zip(reqs, compute(adapter, reqs), strict=True))
            return [results[req] for req in requests]

    def _compute_requests(self, adapter: str | None, reqs: list[Request]) -> list[torch.Tensor]:
        done = self._compute(adapter, [req.token_ids for req in reqs])
        return [done[req.token_ids] for req in reqs]

    def _compute(
        self, adapter: str | None, prompts: list[tuple[int, ...]]
    ) -> dict[tuple[int, ...], torch.Tensor]:
        """Compute ``prompts`` under the active adapter; return log-probs by prompt.

        ``adapter`` is the adapter version's peft name (its prefix tree's key; None: base).

        Prompts that share an uncached stretch of at least :data:`MIN_SHARED` tokens
        (many questions after one new system prompt) first have that shared prefix
        computed once, recursively; then every prompt runs from its longest cached
        prefix.
        """
        layout = self._layout
        done: dict[tuple[int, ...], torch.Tensor] = {}
        rows = [self._row(adapter, ids, record=False) for ids in prompts]
        if layout is not None and len(rows) > 1:
            shared = shared_prefixes(rows, MIN_SHARED)
            if shared:
                done.update(self._compute(adapter, shared))
                rows = [
                    self._row(adapter, r.token_ids, record=False)
                    for r in rows
                    if r.token_ids not in done
                ]
        per_token = layout.bytes_per_token if layout else 0
        for index, planned in enumerate(plan_groups(rows, per_token, self.max_batch_kv_bytes)):
            # After the first forward, look up again: inserts may have reused the slots
            # found before (evictions) or added longer prefixes.
            if index:
                group = [self._row(adapter, r.token_ids, record=False) for r in planned]
            else:
                group = planned
            if layout is not None:
                for row in group:
                    self.kv_cache.count(row.past_len)
            logits, buffer, width_past = self._forward(group)
            rows_out = log_softmax_rows(
                logits, self._logprobs_workspace, self._helper, self.row_pool
            )
            for row, out in zip(group, rows_out, strict=True):
                done[row.token_ids] = out
            self._store_kv(adapter, group, buffer, width_past)
            del buffer, logits
        return done

    def _row(
        self, adapter: str | None, ids: tuple[int, ...], *, record: bool, first: int | None = None
    ) -> Row:
        """A row of a forward: ``ids`` run from the longest cached prefix of ``ids[:first]``.

        ``first`` (default: the last position, whose logits are wanted) is the first
        position the forward must compute.
        """
        if self._layout is None:
            return Row(ids, [], 0)
        limit = len(ids) - 1 if first is None else first
        segments = self.kv_cache.match(adapter, ids, limit, record=record)
        return Row(ids, segments, sum(used for _, used in segments))

    def _forward(self, group: list[Row], *, all_positions: bool = False) -> Any:
        """:func:`run_group` over ``group`` with this model's buffers, helper and kernel."""
        return run_group(
            self.model,
            group,
            self._layout,
            keep_kwarg=self._keep_kwarg,
            workspace=self._workspace,
            pool=self.kv_cache.pool,
            logits_workspace=self._logits_workspace,
            helper=self._helper,
            onednn=self.linear_kernel == "onednn",
            all_positions=all_positions,
        )

    def _store_kv(
        self, adapter: str | None, group: list[Row], buffer: Any, width_past: int
    ) -> None:
        """Keep the keys and values a forward over ``group`` computed (``buffer``, if any)."""
        if buffer is not None:
            self.kv_cache.insert_many(
                adapter,
                [(row.token_ids, row.past_len) for row in group],
                buffer[:, :, :, width_past:],
            )

    def next_token_logprobs_uncached(
        self, token_ids: Sequence[int], lora_name: str | None = None
    ) -> torch.Tensor:
        """Log-probs from one plain forward over the whole prompt: no cache, no batching.

        The reference the cached path is tested against (and genlm-backend's method).
        """
        req = self.make_request(token_ids, lora_name)
        with self.exclusive_access(), torch.no_grad():
            self._activate(self.adapter_handle(req))
            ids = torch.tensor(
                [req.token_ids], device=self.model.get_input_embeddings().weight.device
            )
            logits = self.model(ids, use_cache=False).logits[0, -1]
            return torch.log_softmax(logits, dim=-1, dtype=torch.float32).cpu()

    def cache_kv(self, prompt_tokens: Sequence[int], lora_name: str | None = None) -> None:
        """Compute and cache a prompt's keys and values (and next-token log-probs) now."""
        self.batch_next_token_logprobs_sync([prompt_tokens], lora_name)

    # -- LoRA ---------------------------------------------------------------------------

    def load_adapter(self, adapter: LoraAdapter) -> str:
        """Load a peft LoRA adapter version under its unique name (the core's hook).

        Raises:
            MissingDependencyError: peft is not installed.
            ModelLoadError: The adapter cannot be loaded from ``adapter.path``.
        """
        if importlib.util.find_spec("peft") is None:
            raise MissingDependencyError(
                "LoRA adapters need peft, which is not installed: pip install 'genlm-hf[peft]'"
            )
        try:
            self.model.load_adapter(adapter.path, adapter_name=adapter.engine_name)
        except Exception as exc:
            raise ModelLoadError(
                f"could not load LoRA adapter {adapter.name!r} from {adapter.path!r}: "
                f"{type(exc).__name__}: {exc}. Pass a directory saved by peft's "
                f"save_pretrained (adapter_config.json + adapter weights) for this base model"
            ) from exc
        self._active = _UNKNOWN
        return adapter.engine_name

    def unload_adapter(self, adapter: LoraAdapter, handle: str) -> None:
        """Delete an adapter version from the model, with its cached keys and values."""
        if self.model is not None:
            self.model.delete_adapter(handle)
        self.kv_cache.drop_adapter(handle)
        self._active = _UNKNOWN

    def _activate(self, adapter: str | None) -> None:
        """Enable the peft adapter ``adapter`` (None: the base model), if not already."""
        if adapter is self._active or adapter == self._active:
            return
        if adapter is None:
            if getattr(self.model, "_hf_peft_config_loaded", False):
                self.model.disable_adapters()
        else:
            self.model.set_adapter(adapter)
            self.model.enable_adapters()
        self._active = adapter

    # -- caches and lifecycle -------------------------------------------------------------

    @property
    def kv_cache_stats(self) -> KVCacheStats:
        """Size (bytes, segments, tokens) and hit counts of the prefix K/V cache."""
        return self.kv_cache.stats

    def cache_info(self) -> dict[str, Any]:
        """Memory at a glance: K/V cache statistics, the reused forward buffer, log-probs."""
        return {
            "kv": self.kv_cache.stats,
            "kv_workspace_bytes": self._workspace.nbytes,
            "logits_workspace_bytes": self._logits_workspace.nbytes
            + self._logprobs_workspace.nbytes,
            "outputs": self.output_cache_info(),
        }

    def clear_kv_cache(self) -> None:
        """Drop every cached key/value tensor (log-prob cache kept)."""
        with self.exclusive_access():
            self.kv_cache.clear()

    def clear_cache(self) -> None:
        """Drop cached log-probs and key/value tensors."""
        self.clear_kv_cache()
        super().clear_cache()

    def _release(self) -> None:
        super()._release()  # closes the batchers, unloads adapters, clears the caches
        with self.exclusive_access():  # no forward runs past this point
            self.model = None
            self._workspace.release()
            self._logits_workspace.release()
            self._logprobs_workspace.release()
            if self._helper is not None:
                self._helper.shutdown(wait=False)
                self._helper = None


# -- helpers -------------------------------------------------------------------------------


def _load(what: str, model_id: str, loader: Any, **opts: Any) -> Any:
    try:
        return loader(model_id, **opts)
    except Exception as exc:
        raise ModelLoadError(
            f"could not load the {what} of {model_id!r}: {type(exc).__name__}: {exc}. "
            f"Pass a local directory holding config.json, the weights and the tokenizer "
            f"files, or a hub id already in the Hugging Face cache (downloads need network "
            f"access and HF_HUB_OFFLINE unset)"
        ) from exc


def _logits_width(model: Any) -> int:
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if weight is not None and weight.ndim == 2:
        return int(weight.shape[0])
    return int(model.config.get_text_config().vocab_size)


def _max_positions(model: Any) -> int | None:
    config = model.config.get_text_config()
    n = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    return int(n) if isinstance(n, int) and n > 0 else None


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1

"""AsyncTransformer: a Hugging Face causal LM behind genlm-core's AsyncLM contract.

What makes it fast, compared with genlm-backend 0.3.1's class of the same name:

* **Prefix K/V reuse.** Every forward stores the keys and values it computed in a
  [`PrefixKVCache`][genlm_hf.kvcache.PrefixKVCache]; a later request runs the model only on
  the tokens after its longest cached prefix. A sampler's step is one token per
  particle, not its whole context again.
* **One forward per batch.** The AutoBatcher hands over the distinct concurrent
  requests; their new tokens run as one padded forward with the cached pasts
  assembled into one buffer (see `genlm_hf._forward`), and logits are computed
  only at each row's last position.
* **Faster linear layers on CPUs.** Float32 linear layers (and the output
  projection, in cache-sized blocks) run through oneDNN rather than torch's BLAS
  (MKL) where that is faster: about twice as fast on the AMD CPU measured; on Intel
  CPUs, whose MKL is tuned, only few-row output projections (see `genlm_hf._linear`).
* **No autograd.** Forwards run under ``torch.no_grad()`` (not ``inference_mode``: its
  tensors refuse in-place updates outside it, and callers do mask log-probs in place).
* **Bounded memory.** K/V tensors and cached log-probs each live under a byte budget
  with least-recently-used eviction; genlm-backend's trie grows without limit.

LoRA adapters (peft's functional API, see `genlm_hf._peft`) are selected per request;
requests are grouped per adapter version, and each version has its own prefix tree
(genlm-core keeps the adapter table; this class implements its load/unload hooks).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib.util
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from genlm_backend_kit import DEFAULT_KV_CACHE_BYTES, PrefixCachedLM, max_positions_of
from genlm_core.checks import is_int_at_least
from genlm_core.lm import LoraAdapter, PrefixRequest
from genlm_core.loading import check_dtype, resolve_model_name
from genlm_hf import _peft
from genlm_hf._device import GPU_BATCH_SIZE, default_budgets, split_kv_budget
from genlm_hf._forward import (
    ForwardInput,
    KVLayout,
    accepts_logits_to_keep,
    log_softmax_rows,
    probe_layout,
    run_group,
)
from genlm_hf._in_place import in_place_forward
from genlm_hf._linear import resolve_linear_kernel
from genlm_hf._threads import (
    auto_worker_threads,
    batch_only_threads,
    set_caller_threads,
    set_thread_torch_threads,
    usable_cpus,
)
from genlm_hf._workspace import Workspace
from genlm_hf.errors import MissingDependencyError, ModelLoadError
from genlm_hf.kvcache import PrefixKVCache
from genlm_hf.prefixes import ForwardSteps, PrefixForwards

__all__ = [
    "DEFAULT_KV_CACHE_BYTES",
    "AsyncTransformer",
]

_UNKNOWN = object()  # adapter state after loading/unloading one: re-apply on next use


class AsyncTransformer(PrefixCachedLM):
    """Asynchronous, autobatched, prefix-cached wrapper of a transformers causal LM.

    Args:
        hf_model: A ``transformers`` causal LM (``AutoModelForCausalLM``).
        hf_tokenizer: Its tokenizer.
        batch_size: Most distinct requests per forward (default 64 on a CPU, 512 on a
            GPU: every forward reads all the weights, see `genlm_hf._device.GPU_BATCH_SIZE`).
        max_wait: Seconds a batch may wait for more callers (default 0: dispatch as
            soon as the event loop has no runnable callers left).
        kv_cache_bytes: Byte budget of the model's working memory beyond its weights and
            cached log-probs: the forward's reused K/V buffer and a reserve for its
            other working memory (each a quarter of the budget, 64 MiB at most; see
            `genlm_hf._device.split_kv_budget`), and the prefix cache's slot pool (the rest).
            0 disables prefix reuse: every request then runs its whole prompt.
            Default: 1 GiB on a CPU; on a GPU 30% of the memory free when the model
            is wrapped (see `genlm_hf._device.default_budgets`).
        max_batch_kv_bytes: Cap on one forward's key/value buffer; larger batches are
            split into several forwards. Default: 256 MiB on a CPU; on a GPU a
            quarter of ``kv_cache_bytes``.
        worker_threads: Torch threads of the batcher's worker thread, which runs the
            forwards (no other thread's setting changes). None: 1 for a CPU model of
            fewer than 20M parameters, whose operations are too small to gain from
            threads while a second multi-threaded torch thread slows the caller's own
            torch work (see `genlm_hf._threads`); torch's setting otherwise.
        caller_threads: Torch threads of the thread that builds the model (normally its
            event loop's). None: where the worker runs multi-threaded on a CPU, 1, its
            idle OpenMP threads ended ([`leave_cores_to_worker`][genlm_hf.leave_cores_to_worker],
            which a loop in another thread can call): else SmolLM2-135M's 2-16-row
            forwards took 89-126 ms, not 65-93 (`genlm_hf._threads`). An integer: that many.
        row_device: Where the log-prob rows callers get live. ``"auto"`` (default): on the
            model's device (no transfer to the host: faster on an H100, ``docs/reports/gpu.md``);
            ``"cpu"``: moved to the CPU, as genlm-backend 0.3.1 does; ``"model"``: on the
            output layer's device. The resolved device is `row_device`.
        linear_kernel: How the cached forwards compute float32 linear layers on a CPU.
            ``"auto"`` (default): through oneDNN when this torch has it, for the layers
            and row counts where it is faster than torch's BLAS (about twice as fast on
            the AMD CPU measured; on Intel CPUs only the output projection of 4-12 rows,
            `genlm_hf._linear`); ``"onednn"``: the same, an error where it cannot run;
            ``"torch"``: torch's own (always, on GPUs and in half precision). The
            resolved choice is [`linear_kernel`][].
        kv_reads: How a forward reads the rows' cached keys and values. ``"gather"``
            (default): copied out of the prefix cache into one batch, new ones copied
            back; ``"in_place"``: read from the cache's slots and written into new ones
            (`genlm_hf._in_place`; what a GPU's decode step needs; not faster on a CPU).
        cuda_graphs: With ``kv_reads="in_place"`` on CUDA, replay one-token steps of the
            base model from CUDA graphs captured per batch-size bucket (`genlm_hf._graphs`).
            None (default): on where that applies; False: off.
        **kwargs: The cache and batching options of [`BatchedAsyncLM`][genlm_core.lm.BatchedAsyncLM]
            (``cache_size``, ``cache_bytes``, ``trim_heap``, ``timeout``, ...).
    """

    #: Measured: without trims, a 5,000-call sampler run on SmolLM2 kept ~100 MiB of
    #: freed forward buffers resident above the cache budgets (genlm_core.runtime).
    trims_heap_by_default = True

    @contextlib.contextmanager
    def forward_context(self) -> Iterator[None]:
        """Where a batch runs: no autograd; a multi-threaded CPU worker's threads for it only.

        (An idle pool of OpenMP threads slows other models' forwards: `genlm_hf._threads`.)
        """
        threads = self._batch_only_threads
        with torch.no_grad(), threads.batch() if threads else contextlib.nullcontext():
            yield

    def __init__(
        self,
        hf_model: Any,
        hf_tokenizer: Any,
        batch_size: int | None = None,
        max_wait: float | None = None,
        *,
        kv_cache_bytes: int | None = None,
        max_batch_kv_bytes: int | None = None,
        worker_threads: int | None = None,
        caller_threads: int | None = None,
        row_device: str = "auto",
        linear_kernel: str = "auto",
        kv_reads: str = "gather",
        cuda_graphs: bool | None = None,
        **kwargs: Any,
    ) -> None:
        for name, value in (("worker_threads", worker_threads), ("caller_threads", caller_threads)):
            if value is not None and not is_int_at_least(value, 1):
                raise ValueError(
                    f"{name} must be an integer >= 1, or None for automatic, got {value!r}"
                )
        device = torch.device(getattr(hf_model, "device", "cpu"))
        dtype = getattr(hf_model, "dtype", torch.float32)  # transformers: its weights' dtype
        kv_cache_bytes, max_batch_kv_bytes, self._copy_bytes = default_budgets(
            device, kv_cache_bytes, max_batch_kv_bytes
        )
        if batch_size is None and device.type == "cuda":
            batch_size = GPU_BATCH_SIZE
        self.linear_kernel = resolve_linear_kernel(linear_kernel, device, dtype)
        hf_model.eval()
        width = _logits_width(hf_model)
        super().__init__(
            hf_tokenizer,
            hf_model,
            kv_cache_bytes=kv_cache_bytes,
            max_batch_kv_bytes=max_batch_kv_bytes,
            batch_size=batch_size,
            max_wait=max_wait,
            vocab_size=width,
            row_device=resolve_row_device(row_device, hf_model),
            **kwargs,
        )
        self.device = device
        self.worker_threads = (
            worker_threads if worker_threads is not None else auto_worker_threads(hf_model, device)
        )
        # A single-threaded worker gets a second plain thread for a batch's two big ops.
        self._helper: concurrent.futures.ThreadPoolExecutor | None = None
        if self.worker_threads == 1 and usable_cpus() > 1:
            self._helper = concurrent.futures.ThreadPoolExecutor(
                1,
                thread_name_prefix="genlm-hf-helper",
                initializer=set_thread_torch_threads,
                initargs=(1,),
            )
        self._active: object = None  # adapter (peft name) currently enabled on the model
        self._keep_kwarg = accepts_logits_to_keep(hf_model)
        self.max_positions = max_positions_of(hf_model.config.get_text_config())
        # The budget covers the forward's reused K/V buffer, a reserve for the rest of a
        # forward's working memory, and the prefix cache (what is left).
        on_gpu = device.type == "cuda"
        keep, reserve = split_kv_budget(kv_cache_bytes, self.max_batch_kv_bytes, on_gpu=on_gpu)
        gather_keep = keep if on_gpu else 0  # on a CPU the gather temporary is freed at once
        self._workspace = Workspace(keep_bytes=keep)
        self._gather_workspace = Workspace(keep_bytes=gather_keep)
        # Logits and log-probs of a batch: reused buffers, inside the working reserve.
        self._logits_workspace = Workspace(keep_bytes=reserve // 4)
        self._logprobs_workspace = Workspace(keep_bytes=reserve // 4)
        self.kv_cache = PrefixKVCache(kv_cache_bytes - keep - gather_keep - reserve)
        self._layout: KVLayout | None = None
        if kv_cache_bytes > 0:
            self._layout, self.kv_reuse_off_reason = probe_layout(hf_model)
        self.bytes_per_token = self._layout.bytes_per_token if self._layout else 0
        self._in_place = in_place_forward(
            kv_reads, cuda_graphs, hf_model, self._layout, self.kv_cache,
            self.kv_reuse_off_reason, self.batch_size, keep_kwarg=self._keep_kwarg,
            logits_workspace=self._logits_workspace, helper=self._helper,
            onednn=self.linear_kernel == "onednn",
        )  # fmt: skip
        self._prefixes = PrefixForwards(
            ForwardSteps(self.forward_input, self._forward, self._log_softmax, self._store_kv),
            cache=self.cache,
            width=len(self.byte_vocab),
            bytes_per_token=self.bytes_per_token,
            max_batch_kv_bytes=self.max_batch_kv_bytes,
        )
        self._batch_only_threads = batch_only_threads(self.worker_threads, device)
        # Last: the probe's forward above ran parallel torch work in this thread.
        set_caller_threads(caller_threads, self._batch_only_threads is not None)

    # -- loading ----------------------------------------------------------------------

    @classmethod
    def from_name(
        cls,
        model_id: str,
        bitsandbytes_opts: dict[str, Any] | None = None,
        hf_opts: dict[str, Any] | None = None,
        *,
        dtype: str | None = None,
        revision: str | None = None,
        **kwargs: Any,
    ) -> AsyncTransformer:
        """Load a model and its tokenizer from a hub id or a local directory.

        Args:
            model_id: Hub id (``"HuggingFaceTB/SmolLM2-135M-Instruct"``), local directory,
                or an embedded model's name (``"smollm2-135m-instruct"``: no hub needed).
            bitsandbytes_opts: Options of ``transformers.BitsAndBytesConfig``
                (e.g. ``{"load_in_4bit": True}``); needs bitsandbytes and, mostly, CUDA.
            hf_opts: Extra keyword arguments of ``AutoModelForCausalLM.from_pretrained``
                (``device_map``, ``attn_implementation``, ...); they override the others.
            dtype: The weights' dtype: ``"float32"``, ``"bfloat16"``, ``"float16"`` or
                ``"auto"`` (the checkpoint's). Default: float32 on a CPU (half precision
                is slow and inexact there), ``"auto"`` on CUDA (with ``device_map="auto"``).
            revision: Hub revision (a branch, tag or commit).
            **kwargs: Passed to [`AsyncTransformer`][].

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
        if dtype is not None:
            dtype = check_dtype(dtype, "hf")
            opts["dtype"] = dtype if dtype == "auto" else getattr(torch, dtype)
        if revision is not None:
            opts["revision"] = revision
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
        tok_opts = {"revision": revision} if revision is not None else {}
        tokenizer = _load("tokenizer", model_id, AutoTokenizer.from_pretrained, **tok_opts)
        model = _load("model", model_id, AutoModelForCausalLM.from_pretrained, **opts)
        return cls(model, tokenizer, **kwargs)

    # -- the batch computation ----------------------------------------------------------

    def init_worker_thread(self) -> None:
        """Give the model's worker thread [`worker_threads`][] torch threads, during batches."""
        if self.worker_threads is not None:
            set_thread_torch_threads(self.worker_threads)
        if self._batch_only_threads is not None:
            self._batch_only_threads.adopt()

    def compute_prefix_batch(self, requests: list[PrefixRequest]) -> list[list[torch.Tensor]]:
        """Log-probs after every prefix of each sequence: one forward over its new tokens.

        The forward keeps the logits of every position (in chunks, see
        `genlm_hf.prefixes`) and stores the sequence's keys and values in the
        prefix cache, so later calls along it, or branching off it, run only their
        own new tokens; the core puts every row in the output cache.
        """
        return self._per_adapter(requests, self._prefixes.compute)

    def forward_input(
        self, adapter: str | None, ids: tuple[int, ...], *, first: int | None = None
    ) -> ForwardInput:
        """The forward input of ``ids`` run from the longest cached prefix of ``ids[:first]``.

        ``first`` (default: the last position, whose logits are wanted) is the first
        position the forward must compute.
        """
        if self._layout is None:
            return ForwardInput(ids, [], 0)
        limit = len(ids) - 1 if first is None else first
        segments = self.kv_cache.match(adapter, ids, limit, record=False)
        return ForwardInput(ids, segments, sum(used for _, used in segments))

    def _forward(self, group: list[ForwardInput], *, all_positions: bool = False) -> Any:
        """[`run_group`][] over ``group`` with this model's buffers, helper and kernel."""
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
            max_copy_bytes=self._copy_bytes,
            gather_workspace=self._gather_workspace,
        )

    def forward_rows(self, adapter: str | None, group: list[ForwardInput]) -> list[torch.Tensor]:
        """One forward over ``group`` (the base class's hook): log-probs, K/V stored."""
        if self._in_place is not None and (last := self._in_place(adapter, group)) is not None:
            return self._log_softmax(last)
        logits, buffer, width_past = self._forward(group)
        rows = self._log_softmax(logits)
        self._store_kv(adapter, group, buffer, width_past)
        return rows

    def _log_softmax(self, logits: torch.Tensor) -> list[torch.Tensor]:
        """One float32 log-prob row per row of ``logits``, on `row_device`.

        Rows kept on the model's device are views of one batched result: the core
        copies them into rows of their own with one multi-tensor copy.
        """
        if self.row_device.type != "cpu":
            lp = torch.log_softmax(logits, dim=-1, dtype=torch.float32)
            return list(lp.to(self.row_device).unbind(0))
        return log_softmax_rows(logits, self._logprobs_workspace, self._helper, self.row_pool)

    def _store_kv(
        self, adapter: str | None, group: list[ForwardInput], buffer: Any, width_past: int
    ) -> None:
        """Keep the keys and values a forward over ``group`` computed (``buffer``, if any)."""
        if buffer is not None:
            self.kv_cache.insert_many(
                adapter,
                [(row.token_ids, row.past_len) for row in group],
                buffer[:, :, :, width_past:],
                max_copy_bytes=self._copy_bytes,
            )

    def plain_logprobs(self, token_ids: tuple[int, ...]) -> torch.Tensor:
        """One forward over the whole prompt, no cache (the base class's uncached path)."""
        ids = torch.tensor([token_ids], device=self.model.get_input_embeddings().weight.device)
        logits = self.model(ids, use_cache=False).logits[0, -1]
        return torch.log_softmax(logits, dim=-1, dtype=torch.float32).to(self.row_device)

    def cache_kv(self, prompt_tokens: Sequence[int], lora_name: str | None = None) -> None:
        """Compute and cache a prompt's keys and values (and next-token log-probs) now."""
        self.batch_next_token_logprobs_sync([prompt_tokens], lora_name)

    # -- LoRA ---------------------------------------------------------------------------

    def load_weights(self, adapter: LoraAdapter) -> None:
        """Load a peft LoRA adapter version under its unique name.

        Raises:
            MissingDependencyError: peft is not installed.
            ModelLoadError: The adapter cannot be loaded from ``adapter.path``.
        """
        if importlib.util.find_spec("peft") is None:
            raise MissingDependencyError(
                "LoRA adapters need peft, which is not installed: pip install 'genlm-hf[peft]'"
            )
        self._active = _UNKNOWN
        if self._in_place is not None:  # graphs recorded the layers as they were
            self._in_place.forget_graphs()
        try:
            _peft.attach(self.model, adapter.path, adapter.engine_name)
        except Exception as exc:
            raise ModelLoadError(
                f"could not load LoRA adapter {adapter.name!r} from {adapter.path!r}: "
                f"{type(exc).__name__}: {exc}. Pass a directory saved by peft's "
                f"save_pretrained (adapter_config.json + adapter weights) for this base model"
            ) from exc

    def delete_weights(self, name: str) -> None:
        """Remove the adapter loaded under ``name`` (the base class's hook)."""
        self._active = _UNKNOWN
        if self._in_place is not None:
            self._in_place.forget_graphs()
        _peft.detach(self.model, name)

    def activate_adapter(self, adapter: str | None) -> None:
        """Enable the peft adapter ``adapter`` (None: the base model), if not already."""
        if adapter is self._active or adapter == self._active:
            return
        self._active = _UNKNOWN  # until activate returns: a failure leaves no false claim
        _peft.activate(self.model, adapter)  # type: ignore[arg-type]
        self._active = adapter

    # -- caches and lifecycle -------------------------------------------------------------

    def cache_info(self) -> dict[str, Any]:
        """Memory at a glance: K/V cache statistics, the reused forward buffer, log-probs."""
        return {
            **super().cache_info(),
            "kv_workspace_bytes": self._workspace.nbytes + self._gather_workspace.nbytes,
            "logits_workspace_bytes": self._logits_workspace.nbytes
            + self._logprobs_workspace.nbytes,
        }

    def _free_buffers(self) -> None:
        """Free the reused buffers and the helper thread (the base class's hook)."""
        self._workspace.release()
        self._gather_workspace.release()
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


ROW_DEVICES = ("auto", "cpu", "model")


def resolve_row_device(row_device: Any, model: Any) -> torch.device:
    """The device of the rows callers get, for ``row_device`` (see [`AsyncTransformer`][]).

    Raises:
        ValueError: ``row_device`` is not one of [`ROW_DEVICES`][].
    """
    if row_device not in ROW_DEVICES:
        raise ValueError(
            f"row_device must be one of {', '.join(map(repr, ROW_DEVICES))}, got {row_device!r}: "
            f"'model' keeps rows on the model's device (a GPU), 'cpu' moves them to the host"
        )
    if row_device == "cpu":
        return torch.device("cpu")
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    device = weight.device if weight is not None else torch.device(getattr(model, "device", "cpu"))
    if device.type == "meta":  # offloaded by accelerate: logits reach the execution device
        device = torch.device(getattr(model, "device", "cpu"))
    return device


def _logits_width(model: Any) -> int:
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if weight is not None and weight.ndim == 2:
        return int(weight.shape[0])
    return int(model.config.get_text_config().vocab_size)

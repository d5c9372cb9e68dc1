"""AsyncMlxLM: an mlx-lm model behind genlm-core's AsyncLM contract.

What makes it fast, compared with genlm-backend 0.3.1's class of the same name:

* **Prefix K/V reuse for any set of prompts.** Every forward stores its keys and
  values in a [`PrefixKVCache`][genlm_mlx.kvcache.PrefixKVCache] (a radix tree under a byte
  budget, LRU-evicted); a later request runs the model only on the tokens after its
  longest cached prefix, whichever earlier request computed it. genlm-backend keeps
  one pool of live rows, reused only when a batch extends the previous one.
* **One forward per batch.** The AutoBatcher hands over the distinct concurrent
  requests; their new tokens run as one padded forward over the assembled pasts
  (see `genlm_mlx._forward`), one ``mx.eval`` per batch.
* **A real BLAS on Linux.** mlx's Linux CPU build ships the reference BLAS; importing
  this module first loads MKL globally when installed (see `genlm_mlx._blas`).

Models whose cache is not the standard per-layer key/value one (sliding windows,
state-space layers) are detected when the model is wrapped and run without prefix
reuse: slower, never wrong. LoRA adapters in mlx-lm's format are selected per request.
"""

from __future__ import annotations

from typing import Any

from genlm_mlx._blas import blas_status, load_fast_blas

load_fast_blas()  # before mlx.core is imported anywhere below

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from genlm_backend_kit import (  # noqa: E402
    PrefixCachedLM,
    max_positions_of,
)
from genlm_core.lm import LoraAdapter  # noqa: E402
from genlm_core.loading import check_dtype, resolve_model_name  # noqa: E402
from genlm_mlx import _lora  # noqa: E402
from genlm_mlx._forward import ForwardInput, run_group, run_plain  # noqa: E402
from genlm_mlx._loading import ModelLoadError, load_model, resolve_path  # noqa: E402
from genlm_mlx._lora import Switch  # noqa: E402
from genlm_mlx.kvcache import PrefixKVCache  # noqa: E402

__all__ = [
    "AsyncMlxLM",
    "ModelLoadError",
    "blas_status",
]

_DTYPES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}


class AsyncMlxLM(PrefixCachedLM):
    """Asynchronous, autobatched, prefix-cached wrapper of an mlx-lm model.

    Args:
        mlx_lm_model: An mlx-lm model (``mlx_lm.utils.load_model``).
        tokenizer: Its Hugging Face tokenizer (an mlx-lm ``TokenizerWrapper`` works too).
        **kwargs: ``batch_size`` (most distinct requests per forward, default 64),
            ``max_wait``, ``kv_cache_bytes`` (the budget of cached key/value arrays; 0 turns
            prefix reuse off) and ``max_batch_kv_bytes`` (see
            [`PrefixCachedLM`][genlm_backend_kit.PrefixCachedLM]), and the cache and batching
            options of [`BatchedAsyncLM`][genlm_core.lm.BatchedAsyncLM].
    """

    def __init__(
        self,
        mlx_lm_model: Any,
        tokenizer: Any,
        **kwargs: Any,
    ) -> None:
        if type(tokenizer).__name__ == "TokenizerWrapper":  # mlx_lm.load's wrapper
            tokenizer = tokenizer._tokenizer
        mlx_lm_model.eval()  # training mode would enable dropout
        # Evaluate lazily loaded weights here: mlx streams are per thread, and forwards
        # run in the batcher's thread, which cannot run graph nodes recorded on this one.
        mx.eval(mlx_lm_model.parameters())
        super().__init__(
            tokenizer,
            mlx_lm_model,
            vocab_size=_logits_width(mlx_lm_model),
            **kwargs,
        )
        self._switch = Switch()
        self.max_positions = max_positions_of(getattr(mlx_lm_model, "args", None))
        self.kv_cache = PrefixKVCache(self.kv_cache_bytes)
        self._n_layers = len(getattr(mlx_lm_model, "layers", []))
        if self.kv_cache_bytes > 0:
            # Probed once per model object: tests and users may wrap one model many times.
            probed = getattr(mlx_lm_model, "_genlm_kv_probe", None)
            if probed is None:
                probed = self._probe_kv_reuse()
                mlx_lm_model._genlm_kv_probe = probed
            self.kv_reuse_off_reason, self.bytes_per_token = probed

    # -- loading ----------------------------------------------------------------------

    @classmethod
    def from_name(
        cls,
        model_name: str,
        model_config: dict[str, Any] | None = None,
        *,
        dtype: str | None = None,
        revision: str | None = None,
        **kwargs: Any,
    ) -> AsyncMlxLM:
        """Load an mlx-lm model and its tokenizer from a hub id or a local directory.

        Args:
            model_name: Hub id (``"HuggingFaceTB/SmolLM2-135M-Instruct"``, looked up in
                the Hugging Face cache when ``HF_HUB_OFFLINE=1``), local directory, or an
                embedded model's name (``"smollm2-135m-instruct"``: no hub needed).
            model_config: Overrides of ``config.json`` passed to mlx-lm.
            dtype: The weights' dtype: ``"float32"``, ``"bfloat16"``, ``"float16"`` or
                ``"auto"`` (the checkpoint's). Default: float32 on a CPU (half precision
                there is slow and inexact), the checkpoint's dtype on Apple silicon.
            revision: Hub revision (a branch, tag or commit).
            **kwargs: Passed to [`AsyncMlxLM`][] (``batch_size``, ``kv_cache_bytes``...).

        Raises:
            ModelLoadError: The model or tokenizer cannot be loaded, or mlx-lm would
                build it with a wrong RoPE theta.
        """
        from transformers import AutoTokenizer

        path = resolve_path(resolve_model_name(model_name), revision)
        model, _ = load_model(path, model_config)
        if dtype is None and mx.default_device() == mx.cpu:
            dtype = "float32"
        if dtype is not None and check_dtype(dtype, "mlx") != "auto":
            model.set_dtype(_DTYPES[check_dtype(dtype, "mlx")])
            mx.eval(model.parameters())
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(path))
        except Exception as exc:
            raise ModelLoadError(
                f"could not load the tokenizer of {model_name!r} from {str(path)!r}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        return cls(model, tokenizer, **kwargs)

    def _probe_kv_reuse(self) -> tuple[str, int]:
        """Check prefix reuse against a plain forward; return (reason it is off, bytes/token).

        The reason is '' when reuse works.

        Two rows of different past lengths run through the cached path and must match
        plain forwards, so a model with another cache protocol, positions taken from
        elsewhere, or sliding windows is caught here rather than giving wrong log-probs.
        """
        make_cache = getattr(self.model, "make_cache", None)
        if make_cache is not None:
            from mlx_lm.models.cache import KVCache

            kinds = {type(c).__name__ for c in make_cache()}
            if kinds != {KVCache.__name__}:
                return f"the model's cache layers are {sorted(kinds)}, not plain KVCache", 0
        if self._n_layers == 0:
            return "the model exposes no .layers", 0
        n = min(self.vocab_size, 50)
        a = tuple(range(1, 9))
        b = tuple(range(n - 1, n - 6, -1))
        c = a[:5] + (n - 7, n - 8, n - 9)
        try:
            _, kv_a = run_group(self.model, [ForwardInput(a[:5], [], 0)], self._n_layers)
            _, kv_b = run_group(self.model, [ForwardInput(b[:2], [], 0)], self._n_layers)
            # padded: pasts of different lengths (array mask, one RoPE offset per row)
            padded, _ = run_group(
                self.model,
                [ForwardInput(a, [kv_a[0]], 5), ForwardInput(b, [kv_b[0]], 2)],
                self._n_layers,
            )
            # uniform: equal pasts and widths (causal mask, one offset)
            uniform, _ = run_group(
                self.model,
                [ForwardInput(a, [kv_a[0]], 5), ForwardInput(c, [kv_a[0]], 5)],
                self._n_layers,
            )
            want = [run_plain(self.model, [ForwardInput(ids, [], 0)])[0] for ids in (a, b, c)]
            got = [padded[0], padded[1], uniform[1]]
            err = max(mx.abs(g - w).max().item() for g, w in zip(got, want, strict=True))
        except Exception as exc:  # noqa: BLE001 - any failure means: no prefix reuse
            return f"a forward over cached keys/values failed ({type(exc).__name__}: {exc})", 0
        # fp32: batch composition moves logits by ~1e-5; half precision by up to ~0.05.
        # A wrong position or mask moves them by whole units.
        tol = 1e-3 if kv_a[0].dtype == mx.float32 else 0.25
        if not err < tol:
            return (
                f"logits over cached keys/values differ from a plain forward by {err:.2g} "
                f"(tolerance {tol:g})",
                0,
            )
        return "", kv_a[0].nbytes // 5

    # -- the model's side of the computation ------------------------------------------

    def forward_input(
        self, adapter: str | None, ids: tuple[int, ...], *, first: int | None = None
    ) -> ForwardInput:
        """``ids`` from its longest cached prefix (the base class's hook)."""
        if not self.kv_reuse:
            return ForwardInput(ids, [], 0)
        limit = len(ids) - 1 if first is None else first
        parts, past = self.kv_cache.match(adapter, ids, limit, record=False)
        return ForwardInput(ids, parts, past)

    def forward_rows(self, adapter: str | None, group: list[ForwardInput]) -> list[torch.Tensor]:
        """One forward over ``group`` (the base class's hook): log-probs, K/V stored."""
        if self.kv_reuse:
            logits, kvs = run_group(self.model, group, self._n_layers)
            for row, kv in zip(group, kvs, strict=True):
                self.kv_cache.insert(adapter, row.token_ids, row.past_len, kv)
        else:
            logits = run_plain(self.model, group)
            mx.eval(logits)
        out = _log_softmax(logits)
        return [out[j].clone() for j in range(len(group))]

    def plain_logprobs(self, token_ids: tuple[int, ...]) -> torch.Tensor:
        """One forward over the whole prompt, no cache (the base class's uncached path)."""
        logits = run_plain(self.model, [ForwardInput(token_ids, [], 0)])
        mx.eval(logits)
        return _log_softmax(logits)[0]

    def activate_adapter(self, adapter: str | None) -> None:
        """Compute with adapter ``adapter`` from now on (the base class's hook)."""
        self._switch.active = adapter

    # -- LoRA ---------------------------------------------------------------------------

    def load_weights(self, adapter: LoraAdapter) -> None:
        """Load an mlx-lm LoRA adapter version under its unique name.

        The directory holds ``adapter_config.json`` and ``adapters.safetensors`` as
        saved by ``mlx_lm.lora``.

        Raises:
            ModelLoadError: The adapter cannot be read or does not fit the model.
        """
        _lora.load_adapter(self.model, self._switch, adapter.path, adapter.engine_name)

    def delete_weights(self, name: str) -> None:
        """Remove the adapter loaded under ``name`` (the base class's hook)."""
        _lora.unload_adapter(self.model, name)


# -- helpers -------------------------------------------------------------------------------


def _log_softmax(logits: mx.array) -> torch.Tensor:
    """Float32 CPU log-probs from evaluated float32 logits ``(B, vocab)``."""
    return torch.log_softmax(torch.from_numpy(np.array(logits, copy=True)), dim=-1)


def _logits_width(model: Any) -> int:
    """Width of the model's logits, from its head or its input embedding."""
    for owner in (model, getattr(model, "model", None)):
        head = getattr(owner, "lm_head", None)
        weight = getattr(head, "weight", None)
        if weight is not None and weight.ndim == 2:
            return int(weight.shape[0])
    inner = getattr(model, "model", model)
    emb = getattr(inner, "embed_tokens", None) or getattr(inner, "wte", None)
    if emb is not None:
        return int(emb.weight.shape[0])
    return int(model.args.vocab_size)

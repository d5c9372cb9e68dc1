"""PrefixCachedLM: the base of backends that keep the keys and values of computed prefixes.

genlm-hf and genlm-mlx share here: requests grouped per adapter version, shared
uncached stretches computed once, forwards planned under a byte cap, adapters, release.
A subclass implements its model's side (the abstract methods).
"""

from __future__ import annotations

import contextlib
from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import torch

from genlm_backend_kit._hook_names import PREFIX_CACHED, adopt_old_hook_names
from genlm_backend_kit._planning import plan_groups, shared_prefixes
from genlm_core.checks import is_int_at_least
from genlm_core.compat import model_methods as _compat
from genlm_core.lm import BatchedAsyncLM, LoraAdapter, Request

#: Default budget of a prefix-cached backend's keys and values (bytes).
DEFAULT_KV_CACHE_BYTES = 1 << 30
#: Default cap on one forward's keys and values (bytes); bigger batches are split.
DEFAULT_MAX_BATCH_KV_BYTES = 256 << 20
#: Fewest uncached tokens several prompts of a batch must share to get computed once first.
MIN_SHARED = 16


class PrefixCachedLM(BatchedAsyncLM):
    """A `BatchedAsyncLM` over an in-process model with a prefix cache.

    Args:
        model: The model (``None`` once released).
        kv_cache_bytes: Budget of the key/value store (0 turns prefix reuse off).
        max_batch_kv_bytes: Cap on one forward's keys and values.
        **kwargs: Passed to [`BatchedAsyncLM`][genlm_core.lm.BatchedAsyncLM].

    Attributes:
        kv_cache: The key/value store, set by the subclass; the base uses
            ``count(past_len)``, ``drop_adapter(key)``, ``clear()`` and ``stats``.
        kv_reuse_off_reason: Why prefix reuse is off, or ``""`` when it is on.
        bytes_per_token: Key/value bytes of one token (0 when reuse is off).
    """

    #: Context every computation runs in (genlm-hf: ``torch.no_grad``).
    forward_context: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    # genlm-backend 0.3.1's methods, kept for its clients (see genlm_core.compat.model_methods).
    reset_async_queries = _compat.reset_async_queries
    set_lora = _compat.set_lora
    clear_lora = _compat.clear_lora

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        adopt_old_hook_names(cls, PREFIX_CACHED)

    def __init__(
        self,
        tokenizer: Any,
        model: Any,
        *,
        kv_cache_bytes: int = DEFAULT_KV_CACHE_BYTES,
        max_batch_kv_bytes: int = DEFAULT_MAX_BATCH_KV_BYTES,
        **kwargs: Any,
    ) -> None:
        for name, value in (
            ("kv_cache_bytes", kv_cache_bytes),
            ("max_batch_kv_bytes", max_batch_kv_bytes),
        ):
            if not is_int_at_least(value, 0):
                raise ValueError(f"{name} must be an integer >= 0 (bytes), got {value!r}")
        super().__init__(tokenizer, **kwargs)
        self.model = model
        self.kv_cache_bytes = int(kv_cache_bytes)
        self.max_batch_kv_bytes = int(max_batch_kv_bytes)
        self.kv_cache: Any = None
        self.kv_reuse_off_reason = "kv_cache_bytes=0"
        self.bytes_per_token = 0

    @property
    def kv_reuse(self) -> bool:
        """Whether prefix key/value reuse is on (see ``kv_reuse_off_reason`` otherwise)."""
        return not self.kv_reuse_off_reason

    @abstractmethod
    def forward_input(
        self, adapter: Any, token_ids: tuple[int, ...], *, first: int | None = None
    ) -> Any:
        """The forward input of ``token_ids`` from the longest cached prefix before ``first``.

        ``first`` (default: the last position) is the first position to compute. It
        has ``token_ids`` and ``past_len`` (what [`plan_groups`][] reads).
        """

    @abstractmethod
    def forward_rows(self, adapter: Any, group: list[Any]) -> list[torch.Tensor]:
        """One forward over ``group``'s new tokens: keys/values stored, a float32 CPU row each."""

    @abstractmethod
    def plain_logprobs(self, token_ids: tuple[int, ...]) -> torch.Tensor:
        """Log-probs from one plain forward over the whole prompt (no cache), active adapter."""

    @abstractmethod
    def load_weights(self, adapter: LoraAdapter) -> None:
        """Load an adapter version's weights into the model under ``adapter.engine_name``."""

    @abstractmethod
    def delete_weights(self, name: str) -> None:
        """Remove the adapter loaded under ``name`` from the model."""

    @abstractmethod
    def activate_adapter(self, adapter: str | None) -> None:
        """Make the model compute with adapter ``adapter`` (an engine name; None: base)."""

    def compute_batch(self, requests: list[Request]) -> list[torch.Tensor]:
        """Log-probs for distinct requests: per adapter, cached pasts + batched forwards."""
        return self._per_adapter(requests, self._compute_requests)

    def _per_adapter(
        self, requests: Sequence[Any], compute: Callable[[str | None, list[Any]], list[Any]]
    ) -> list[Any]:
        """``compute(adapter, its requests)`` per adapter version, in request order.

        ``adapter`` is the version's engine name (None: the base model), which also keys
        its prefix tree.
        """
        with self.forward_context():
            by_adapter: dict[str | None, list[Any]] = {}
            for req in requests:
                by_adapter.setdefault(self.adapter_handle(req), []).append(req)
            results: dict[Any, Any] = {}
            for adapter, reqs in by_adapter.items():
                self.activate_adapter(adapter)
                results.update(zip(reqs, compute(adapter, reqs), strict=True))
            return [results[req] for req in requests]

    def _compute_requests(self, adapter: str | None, reqs: list[Request]) -> list[torch.Tensor]:
        done = self._compute(adapter, [req.token_ids for req in reqs])
        return [done[req.token_ids] for req in reqs]

    def _compute(
        self, adapter: str | None, prompts: list[tuple[int, ...]]
    ) -> dict[tuple[int, ...], torch.Tensor]:
        """Compute ``prompts`` under the active adapter; return log-probs by prompt.

        A shared uncached stretch of [`MIN_SHARED`][] tokens or more is computed once
        first; then each prompt runs from its longest cached prefix, in forwards under
        [`max_batch_kv_bytes`][].
        """
        done: dict[tuple[int, ...], torch.Tensor] = {}
        inputs = [self.forward_input(adapter, ids) for ids in prompts]
        if self.kv_reuse and len(inputs) > 1:
            shared = shared_prefixes(inputs, MIN_SHARED)
            if shared:
                done.update(self._compute(adapter, shared))
                left = [x.token_ids for x in inputs if x.token_ids not in done]
                inputs = [self.forward_input(adapter, ids) for ids in left]
        groups = plan_groups(inputs, self.bytes_per_token, self.max_batch_kv_bytes)
        for index, planned in enumerate(groups):
            # After the first forward, look up again: inserts may have evicted what was
            # found before, or added longer prefixes.
            group = planned
            if index:
                group = [self.forward_input(adapter, x.token_ids) for x in planned]
            if self.kv_reuse:
                for x in group:
                    self.kv_cache.count(x.past_len)
            for x, out in zip(group, self.forward_rows(adapter, group), strict=True):
                done[x.token_ids] = out
        return done

    def next_token_logprobs_uncached(
        self, token_ids: Sequence[int], lora_name: str | None = None
    ) -> torch.Tensor:
        """Log-probs from one plain forward over the whole prompt: no cache, no batching.

        genlm-backend's method, and the reference the cached path is tested against.
        """
        req = self.make_request(token_ids, lora_name)
        with self.exclusive_access(), self.forward_context():
            if self.model is None:
                raise self._closed_error()
            self.activate_adapter(self.adapter_handle(req))
            return self.plain_logprobs(req.token_ids)

    def load_adapter(self, adapter: LoraAdapter) -> str:
        """Load an adapter version under its unique engine name (the core's hook)."""
        self.load_weights(adapter)
        return adapter.engine_name

    def unload_adapter(self, adapter: LoraAdapter, handle: str) -> None:
        """Remove an adapter version from the model, with its cached keys and values."""
        if self.model is not None:
            self.delete_weights(handle)
        self.kv_cache.drop_adapter(handle)

    @property
    def kv_cache_stats(self) -> Any:
        """Size (bytes, segments, tokens) and hit counts of the prefix K/V cache."""
        return self.kv_cache.stats

    def cache_info(self) -> dict[str, Any]:
        """Memory at a glance: K/V cache statistics and cached log-probs."""
        return {"kv": self.kv_cache.stats, "outputs": self.output_cache_info()}

    def clear_kv_cache(self) -> None:
        """Drop every cached key/value tensor (log-prob cache kept)."""
        with self.exclusive_access():
            self.kv_cache.clear()

    def clear_cache(self) -> None:
        """Drop cached log-probs and key/value tensors."""
        self.clear_kv_cache()
        super().clear_cache()

    def _release(self) -> None:
        super()._release()  # closes the batchers, unloads the adapters, clears the caches
        with self.exclusive_access():  # no forward runs past this point
            self.model = None
            self._free_buffers()

    def _free_buffers(self) -> None:  # noqa: B027 - optional hook
        """Free what the subclass keeps besides the model (reused buffers, threads)."""


def max_positions_of(config: Any) -> int | None:
    """A model's context length from its config (``max_position_embeddings`` or ``n_positions``)."""
    n = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    return int(n) if isinstance(n, int) and n > 0 else None

"""AsyncSGLServerLM: a running SGLang server (or sglang-router) behind the AsyncLM contract.

For models past one machine: ``python -m sglang.launch_server`` (data, tensor or
pipeline parallel; or ``sglang-router`` in front of several servers) does the serving,
and this class talks to it over HTTP. Concurrent calls are coalesced by genlm-core's
AutoBatcher (deduplicated, output-cached), each batch is split into chunks of
``chunk_size`` prompts, and up to ``max_concurrency`` chunks are in flight at once
(one HTTP call each, see `genlm_sgl._http`, whose retries never lose or
duplicate a request). The server's radix cache reuses shared prefixes.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from genlm_core.checks import is_int_at_least
from genlm_core.lm import BatchedAsyncLM, LoraAdapter, Request
from genlm_sgl._http import ServerClient
from genlm_sgl.errors import ModelLoadError, ServerError

__all__ = ["AsyncSGLServerLM"]


class AsyncSGLServerLM(BatchedAsyncLM):
    """Asynchronous, batched next-token log-probs from an SGLang server over HTTP.

    Thread-safe: batches from the worker thread and from sync callers go to the server
    at the same time (the HTTP client and its pool are thread-safe).

    Args:
        client: A `ServerClient` (``from_url`` makes one).
        tokenizer: The served model's Hugging Face tokenizer.
        vocab_size: Width of the model's logits.
        chunk_size: Most prompts per HTTP call.
        max_concurrency: Most HTTP calls in flight.
        **kwargs: The cache and batching options of [`BatchedAsyncLM`][genlm_core.lm.BatchedAsyncLM]
            (``batch_size``, default 256, ``max_wait``, ``cache_size``, ...).
    """

    thread_safe = True
    #: The server batches and schedules itself: larger hand-offs only save round trips.
    default_batch_size = 256

    def __init__(
        self,
        client: ServerClient,
        tokenizer: Any,
        vocab_size: int,
        *,
        chunk_size: int = 32,
        max_concurrency: int = 4,
        **kwargs: Any,
    ) -> None:
        for name, value in (("chunk_size", chunk_size), ("max_concurrency", max_concurrency)):
            if not is_int_at_least(value, 1):
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        super().__init__(tokenizer, vocab_size=vocab_size, **kwargs)
        self.client = client
        self.url = client.url
        self.chunk_size = chunk_size
        self._pool = ThreadPoolExecutor(max_concurrency, thread_name_prefix="genlm-sgl-http")

    @classmethod
    def from_url(
        cls,
        url: str,
        tokenizer: Any = None,
        vocab_size: int | None = None,
        *,
        http_timeout: float = 300.0,
        retries: int = 3,
        max_concurrency: int = 4,
        api_key: str | None = None,
        **kwargs: Any,
    ) -> AsyncSGLServerLM:
        """Connect to the SGLang server (or router) at ``url``.

        Args:
            url: Base URL, e.g. ``http://127.0.0.1:30000``.
            tokenizer: The served model's tokenizer, or a name/path to load it from
                (default: the server's ``tokenizer_path``, read from ``/model_info``).
            vocab_size: Width of the model's logits (default: from the model's config
                at that path).
            http_timeout: Seconds an HTTP call may take (a cold batch on a CPU takes
                seconds). Not ``timeout``, which is genlm-backend's name for ``max_wait``.
            retries: Extra attempts of a failed call (each after aborting it).
            max_concurrency: Most HTTP calls in flight (and pooled connections).
            api_key: The server's ``--api-key``, if it has one.
            **kwargs: Passed to [`AsyncSGLServerLM`][] (``chunk_size``, ...).

        Raises:
            ServerError: The server could not be reached.
            ModelLoadError: The tokenizer or the vocabulary width could not be found.
        """
        client = ServerClient(
            url,
            timeout=http_timeout,
            retries=retries,
            max_connections=max_concurrency,
            api_key=api_key,
        )
        try:
            info = client.get_json("/model_info")
            path = info.get("tokenizer_path") or info.get("model_path")
            if tokenizer is None or isinstance(tokenizer, str):
                tokenizer = _load_tokenizer(tokenizer or path)
            if vocab_size is None:
                vocab_size = _vocab_size(info.get("model_path") or path)
            return cls(client, tokenizer, vocab_size, max_concurrency=max_concurrency, **kwargs)
        except BaseException:
            client.close()
            raise

    # -- log-probs ----------------------------------------------------------------------

    def compute_batch(self, requests: list[Request]) -> list[torch.Tensor]:
        """One HTTP call per chunk of prompts (per adapter), up to ``max_concurrency`` at once.

        The core runs none once the model is closed (its gate), so the client is open here.
        """
        out = self.row_pool.empty_rows(len(requests))
        jobs = []
        groups: dict[str | None, list[int]] = {}
        for i, req in enumerate(requests):
            groups.setdefault(self.adapter_handle(req), []).append(i)
        for lora, index in groups.items():  # the server-side adapter name, None: base
            for start in range(0, len(index), self.chunk_size):
                part = index[start : start + self.chunk_size]
                jobs.append(
                    self._pool.submit(
                        self.client.logprobs,
                        [requests[i].token_ids for i in part],
                        lora,
                        [out[i] for i in part],
                    )
                )
        errors = [job.exception() for job in jobs]  # waits for every chunk
        for error in errors:
            if error is not None:
                raise error
        return out

    def clear_cache(self) -> None:
        """Drop cached outputs and ask the server to flush its radix cache.

        The server refuses while it is running other clients' requests; that refusal
        is ignored (its cache only makes later calls faster).
        """
        super().clear_cache()
        if not self.closed:
            try:
                self.client.http.post("/flush_cache", timeout=30.0)
            except Exception:  # noqa: BLE001 - flushing is an optimisation, never required
                pass

    # -- LoRA ---------------------------------------------------------------------------

    def load_adapter(self, adapter: LoraAdapter) -> str:
        """Load a peft adapter version into the server (the core's hook; ``--enable-lora``).

        The path is read by the server. Returns the server-side name, unique per version.

        Raises:
            ModelLoadError: The server could not load it (its message included).
        """
        server_name = f"{adapter.engine_name}-{uuid.uuid4().hex[:12]}"
        try:
            self.client.post(
                "/load_lora_adapter", {"lora_name": server_name, "lora_path": adapter.path}
            )
        except ServerError as exc:
            raise ModelLoadError(
                f"the SGLang server could not load LoRA adapter {adapter.name!r} from "
                f"{adapter.path!r} (start it with --enable-lora, --max-lora-rank and "
                f"--lora-target-modules): {exc}"
            ) from exc
        return server_name

    def unload_adapter(self, adapter: LoraAdapter, handle: str) -> None:
        """Unload an adapter version from the server (the core's hook)."""
        self.client.post("/unload_lora_adapter", {"lora_name": handle})

    # -- lifecycle ----------------------------------------------------------------------

    def _release(self) -> None:
        super()._release()  # unloads the adapters (a server already gone is reported)
        self._pool.shutdown(wait=True)
        self.client.close()


def _load_tokenizer(path: str | None) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path)
    except Exception as exc:
        raise ModelLoadError(
            f"could not load the served model's tokenizer from {path!r}: "
            f"{type(exc).__name__}: {exc}; pass tokenizer= (a tokenizer, or a name/path)"
        ) from exc


def _vocab_size(path: str | None) -> int:
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(path)
        return int(config.get_text_config().vocab_size)
    except Exception as exc:
        raise ModelLoadError(
            f"could not read the served model's vocabulary size from {path!r}: "
            f"{type(exc).__name__}: {exc}; pass vocab_size="
        ) from exc

"""The HTTP side of genlm-sgl's server backend: one SGLang ``/generate`` call per chunk.

Each chunk of prompts is one ``POST /generate`` with ``max_new_tokens=1``,
``temperature=0`` (greedy: SGLang's returned log-probs are then the raw log-softmax)
and ``top_logprobs_num`` = the vocabulary, returned as SGLang's flat raw arrays in
base64 (``return_flat_raw_output_top_logprobs``, ``..._b64``): per row one float32
and one int32 array, no per-token JSON objects. Rows are matched to prompts by the
request ids we give them, never by position alone.

Retries never lose or duplicate a request: a chunk whose call failed in a way worth
retrying (connection refused or reset, timeout, HTTP 429 or 5xx) is first aborted on
the server by its request ids, then sent again under fresh ids, at most ``retries``
times with exponential backoff; every prompt gets exactly one row or the call raises.
HTTP client: httpx (thread-safe pooled ``Client``, per-phase timeouts, a connection
limit that is our concurrency limit).
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import httpx
import numpy as np
import torch

from genlm_sgl.errors import EngineOutputError, ServerError

__all__ = ["RETRY_STATUS", "ServerClient"]

#: HTTP statuses after which a chunk is retried (after aborting it on the server).
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})

_T = TypeVar("_T")


class ServerClient:
    """Calls one SGLang server (or sglang-router) with bounded retries.

    Args:
        url: Base URL, e.g. ``http://127.0.0.1:30000``.
        timeout: Seconds for one call to answer (connecting: at most 10 s of it).
        retries: Extra attempts per call after a retryable failure.
        backoff: Seconds before the first retry; doubled after each.
        max_connections: Most concurrent calls (the connection pool's size).
        api_key: Sent as a bearer token when the server requires one.
        transport: An httpx transport to send through (e.g. a Unix socket's); default
            httpx's own.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 300.0,
        retries: int = 3,
        backoff: float = 0.5,
        max_connections: int = 4,
        api_key: str | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.retries = retries
        self.backoff = backoff
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self.http = httpx.Client(
            base_url=self.url,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
            headers=headers,
            transport=transport,
        )

    # -- calls ------------------------------------------------------------------------

    def get_json(self, path: str) -> Any:
        """GET ``path`` (with retries) and decode its JSON."""
        return self._call("GET", path, None).json()

    def post(self, path: str, payload: Any) -> httpx.Response:
        """POST JSON to ``path`` with retries; raise on a final failure."""
        return self._call("POST", path, payload)

    def logprobs(
        self,
        prompts: Sequence[Sequence[int]],
        lora: str | None,
        out: Sequence[torch.Tensor],
    ) -> None:
        """Fill ``out[i]`` with the next-token log-probs after ``prompts[i]``.

        Raises:
            ServerError: The server kept failing, or refused the request.
            EngineOutputError: A row is missing or does not cover the vocabulary.
        """
        width = out[0].shape[0]

        def send() -> tuple[list[str], httpx.Response]:
            rids = [f"genlm-{uuid.uuid4().hex}" for _ in prompts]  # fresh ids per attempt
            payload = {
                "input_ids": [list(p) for p in prompts],
                "rid": rids,
                "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
                "return_logprob": True,
                "top_logprobs_num": width,
                "return_flat_raw_output_top_logprobs": True,
                "return_flat_raw_top_logprobs_b64": True,
            }
            if lora is not None:
                payload["lora_path"] = [lora] * len(prompts)
            try:
                return rids, self._send("POST", "/generate", payload)
            except _Retryable:
                self._abort(rids)  # the server may still be running them
                raise

        rids, response = self._retrying(f"a chunk of {len(prompts)} prompts", send)
        body = response.json()
        if isinstance(body, dict):
            body = [body]
        by_rid = {item.get("meta_info", {}).get("id"): item for item in body}
        for rid, row in zip(rids, out, strict=True):
            item = by_rid.get(rid)
            if item is None:
                raise EngineOutputError(
                    f"SGLang server {self.url} returned no result for request {rid} "
                    f"(got {len(body)} results for {len(rids)} prompts)"
                )
            _fill_row(item["meta_info"], rid, row)

    def close(self) -> None:
        """Close the connection pool."""
        self.http.close()

    # -- plumbing ---------------------------------------------------------------------

    def _call(self, method: str, path: str, payload: Any) -> httpx.Response:
        return self._retrying(f"{method} {path}", lambda: self._send(method, path, payload))

    def _retrying(self, what: str, send: Callable[[], _T]) -> _T:
        """``send()``, retried with backoff while it raises `_Retryable`."""
        attempt = 0
        while True:
            try:
                return send()
            except _Retryable as exc:
                attempt += 1
                if attempt > self.retries:
                    raise ServerError(
                        f"SGLang server {self.url} failed {attempt} times for {what}; "
                        f"last error: {exc}"
                    ) from exc.__cause__
                time.sleep(self.backoff * 2 ** (attempt - 1))

    def _send(self, method: str, path: str, payload: Any) -> httpx.Response:
        try:
            response = self.http.request(method, path, json=payload)
        except httpx.TransportError as exc:  # refused, reset, timed out
            raise _Retryable(f"{type(exc).__name__}: {exc}") from exc
        if response.status_code in RETRY_STATUS:
            raise _Retryable(f"HTTP {response.status_code}: {response.text[:300]}")
        if response.status_code >= 400:
            raise ServerError(
                f"SGLang server {self.url} refused {method} {path} with HTTP "
                f"{response.status_code}: {response.text[:500]}"
            )
        return response

    def _abort(self, rids: Sequence[str]) -> None:
        """Ask the server to drop requests of a failed call (best effort)."""
        for rid in rids:
            try:
                self.http.post("/abort_request", json={"rid": rid}, timeout=5.0)
            except httpx.HTTPError:
                return  # the server is unreachable: nothing of ours runs there


class _Retryable(Exception):
    """A failure after which the same call may succeed."""


def _fill_row(meta: dict[str, Any], rid: str, row: torch.Tensor) -> None:
    """Scatter a flat top-logprobs result (ranked values, token ids) into ``row``."""
    width = row.shape[0]
    try:
        values = np.frombuffer(base64.b64decode(meta["output_top_logprobs_val_flat_b64"]), "<f4")
        ids = np.frombuffer(base64.b64decode(meta["output_top_logprobs_idx_flat_b64"]), "<i4")
    except KeyError as exc:
        reason = meta.get("finish_reason")
        raise EngineOutputError(
            f"SGLang returned no flat log-probs for request {rid} (finish reason: {reason}); "
            f"is the server SGLang 0.5.23 or newer?"
        ) from exc
    if values.shape != (width,) or ids.shape != (width,):
        raise EngineOutputError(
            f"request {rid}: SGLang returned {values.shape[0]} log-probs and {ids.shape[0]} "
            f"token ids, expected {width} of each (the full vocabulary)"
        )
    out = row.numpy()  # the row's own memory: no index or value copies on this path
    out.fill(np.nan)
    out[ids] = values
    if np.isnan(out).any():
        raise EngineOutputError(
            f"request {rid}: SGLang's log-prob row does not cover every token id 0..{width - 1}"
        )

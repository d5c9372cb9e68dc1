"""The server backend's HTTP behaviour against the session's real SGLang server.

Failures are injected in front of the real server by an httpx transport that fails
chosen calls and forwards the others; every row still comes from SGLang.
"""

from __future__ import annotations

import httpx
import pytest
from session_requires import require

require("sglang", reason="SGLang is not installed (nox -s sgl installs it)")

import torch  # noqa: E402

from genlm_sgl._http import ServerClient  # noqa: E402
from genlm_sgl.errors import ServerError  # noqa: E402
from genlm_sgl.server import AsyncSGLServerLM  # noqa: E402

PROMPTS = [[1, 5, 6, 7], [1, 5, 6, 7, 8], [1, 100, 200], [42] * 30, [7]]
#: These tests check that each prompt gets its own row once; rows computed in other
#: batch shapes differ by float rounding (seen: 1.8e-4 in a far-tail entry), rows of
#: different prompts by far more.
ATOL = 1e-3


class FailingTransport(httpx.BaseTransport):
    """Fails the first ``fail`` calls to ``path`` (with ``error``); forwards the rest."""

    def __init__(self, path: str, fail: int, error: Exception | int) -> None:
        self.inner = httpx.HTTPTransport()
        self.path, self.fail, self.error = path, fail, error
        self.seen: list[tuple[str, bytes]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.seen.append((request.url.path, request.read()))
        if request.url.path == self.path and self.fail > 0:
            self.fail -= 1
            if isinstance(self.error, int):
                return httpx.Response(self.error, text="injected failure")
            raise self.error
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


def lm_over(server, engine, transport, **opts) -> AsyncSGLServerLM:
    client = ServerClient(server.url, backoff=0.01, transport=transport, **opts)
    return AsyncSGLServerLM(
        client, engine.tokenizer, engine.vocab_size, byte_vocab=engine.byte_vocab, cache_size=0
    )


@pytest.mark.parametrize(
    "error", [httpx.ConnectError("injected: refused"), httpx.ReadTimeout("injected"), 503]
)
def test_retried_chunks_are_aborted_then_answered_once(server, engine, make_server_lm, error):
    expected = make_server_lm(cache_size=0).batch_next_token_logprobs_sync(PROMPTS)
    transport = FailingTransport("/generate", fail=2, error=error)
    lm = lm_over(server, engine, transport, retries=3)
    got = lm.batch_next_token_logprobs_sync(PROMPTS)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)
    paths = [path for path, _ in transport.seen]
    assert paths.count("/generate") == 3  # two failures, one success: one row per prompt
    aborted = [body for path, body in transport.seen if path == "/abort_request"]
    assert len(aborted) == 2 * len(PROMPTS)  # every request of each failed call
    lm.cleanup()


def test_gives_up_after_the_retry_budget_and_the_next_call_works(server, engine):
    transport = FailingTransport("/generate", fail=3, error=httpx.ConnectError("injected"))
    lm = lm_over(server, engine, transport, retries=2)
    with pytest.raises(ServerError, match="failed 3 times"):
        lm.batch_next_token_logprobs_sync(PROMPTS)
    assert lm.next_token_logprobs_sync(PROMPTS[0]).shape == (engine.vocab_size,)
    lm.cleanup()


def test_refusals_are_not_retried(server, engine):
    transport = FailingTransport("/generate", fail=1, error=400)
    lm = lm_over(server, engine, transport, retries=3)
    with pytest.raises(ServerError, match="HTTP 400: injected failure"):
        lm.next_token_logprobs_sync(PROMPTS[0])
    assert [path for path, _ in transport.seen].count("/generate") == 1
    lm.cleanup()


def test_chunks_and_concurrency(server, engine, make_server_lm):
    """6 prompts in chunks of 2 over 3 connections: 3 calls, rows in order."""
    expected = make_server_lm(cache_size=0).batch_next_token_logprobs_sync(PROMPTS + [[3, 4]])
    transport = FailingTransport("/generate", fail=0, error=0)
    client = ServerClient(server.url, transport=transport, max_connections=3)
    lm = AsyncSGLServerLM(
        client,
        engine.tokenizer,
        engine.vocab_size,
        byte_vocab=engine.byte_vocab,
        chunk_size=2,
        max_concurrency=3,
        cache_size=0,
    )
    got = lm.batch_next_token_logprobs_sync(PROMPTS + [[3, 4]])
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)
    assert [path for path, _ in transport.seen].count("/generate") == 3
    lm.cleanup()


def test_unreachable_server_names_the_url():
    with pytest.raises(ServerError, match="127.0.0.1:9"):
        AsyncSGLServerLM.from_url("http://127.0.0.1:9", retries=0)


@pytest.mark.parametrize("name, value", [("chunk_size", 0), ("max_concurrency", "2")])
def test_bad_options_name_the_value(server, engine, name, value):
    client = ServerClient(server.url)
    with pytest.raises(ValueError, match=f"{name} must be an integer >= 1, got {value!r}"):
        AsyncSGLServerLM(client, engine.tokenizer, engine.vocab_size, **{name: value})
    client.close()

"""A model that holds its backend: ``BatchedAsyncLM(tokenizer, backend=...)`` (issue 40).

The backend is a plain object with ``compute_batch`` and, optionally, the other hooks
of :class:`genlm_core.lm.Backend`; the conformance suites hold for such a model as
for a subclass.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from genlm_core.errors import LoraNotSupportedError
from genlm_core.lm import Backend, BatchedAsyncLM, LoraAdapter, PrefixRequest, Request
from genlm_core.lm._options import accepted_options
from genlm_core.testing import AsyncLMConformance, LoraConformance
from genlm_core.testing.byte_tokenizer import ByteTokenizer
from genlm_core.testing.mock import MockAsyncLM
from genlm_core.tokenization import decode_vocab


def seeded_row(width: int, *parts: object) -> torch.Tensor:
    """A normalised row that depends only on ``parts`` (any batch shape gives the same)."""
    seed = int.from_bytes(hashlib.blake2b(repr(parts).encode(), digest_size=8).digest(), "little")
    logits = torch.randn(width, generator=torch.Generator().manual_seed(seed))
    return torch.log_softmax(logits, dim=0)


class HashRows:
    """A backend in a few lines: rows from a hash of the prompt and the adapter's weights."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.weights: dict[tuple[str, int], bytes] = {}  # (name, generation) -> file content
        self.events: list[str] = []
        self.worker_threads: list[threading.Thread] = []

    def compute_batch(self, requests: list[Request]) -> list[torch.Tensor]:
        return [self._row(r.token_ids, r.lora_name, r.generation) for r in requests]

    def _row(self, ids: tuple[int, ...], name: str | None, generation: int) -> torch.Tensor:
        weights = self.weights[(name, generation)] if name is not None else b""
        return seeded_row(self.width, ids, weights)

    def load_adapter(self, adapter: LoraAdapter) -> Any:
        self.weights[(adapter.name, adapter.generation)] = Path(adapter.path).read_bytes()
        self.events.append(f"load {adapter.name}")
        return adapter.generation

    def unload_adapter(self, adapter: LoraAdapter, handle: Any) -> None:
        del self.weights[(adapter.name, handle)]
        self.events.append(f"unload {adapter.name}")

    def init_worker_thread(self) -> None:
        self.worker_threads.append(threading.current_thread())

    def close(self) -> None:
        self.events.append("close")


class WithPrefixes(HashRows):
    """Also every prefix's row in one call, as a forward over the sequence would."""

    def __init__(self, width: int) -> None:
        super().__init__(width)
        self.prefix_calls = 0

    def compute_prefix_batch(self, requests: list[PrefixRequest]) -> list[list[torch.Tensor]]:
        self.prefix_calls += 1
        return [
            [
                self._row(r.token_ids[: n + 1], r.lora_name, r.generation)
                for n in range(r.start, len(r.token_ids))
            ]
            for r in requests
        ]


def model_over(backend_class: type[HashRows] = HashRows, **options: Any) -> BatchedAsyncLM:
    tokenizer = ByteTokenizer()
    width = len(decode_vocab(tokenizer)[0])
    return BatchedAsyncLM(tokenizer, backend=backend_class(width), **options)


class TestBackendObject(AsyncLMConformance):
    @pytest.fixture
    def lm(self):
        model = model_over(batch_size=4)
        yield model
        model.cleanup()


class TestBackendObjectWithPrefixes(AsyncLMConformance):
    @pytest.fixture
    def lm(self):
        model = model_over(WithPrefixes, batch_size=4)
        yield model
        model.cleanup()


class TestBackendObjectAdapters(LoraConformance):
    @pytest.fixture
    def lm(self):
        model = model_over(batch_size=4)
        yield model
        model.cleanup()

    @pytest.fixture
    def lora_adapters(self, tmp_path):
        paths = []
        for version in (1, 2):
            path = tmp_path / f"adapter-v{version}"
            path.write_bytes(f"weights, version {version}".encode())
            paths.append(str(path))
        return tuple(paths)


def test_the_protocol_is_what_a_plain_object_implements() -> None:
    assert isinstance(HashRows(4), Backend)
    assert not isinstance(object(), Backend)


async def test_rows_come_from_the_backend_and_prefixes_in_one_call() -> None:
    lm = model_over(WithPrefixes)
    backend = lm.backend
    row = await lm.next_token_logprobs([1, 2, 3])
    torch.testing.assert_close(row, seeded_row(backend.width, (1, 2, 3), b""))
    rows = await lm.prefix_next_token_logprobs([4, 5, 6, 7])
    assert backend.prefix_calls == 1 and lm.computes_prefixes_in_one_forward
    torch.testing.assert_close(rows[-1], seeded_row(backend.width, (4, 5, 6, 7), b""))
    lm.cleanup()


async def test_hooks_run_where_they_should_and_close_comes_last(tmp_path: Path) -> None:
    lm = model_over()
    backend = lm.backend
    adapter = tmp_path / "a"
    adapter.write_bytes(b"w")
    lm.add_new_lora(str(adapter), "a")
    await lm.next_token_logprobs([1], lora_name="a")
    await lm.next_token_logprobs([2])
    assert len(backend.worker_threads) == 1  # once, in the thread batches run in
    assert backend.worker_threads[0] is not threading.current_thread()
    lm.cleanup()
    lm.cleanup()  # idempotent: close is called once
    assert backend.events == ["load a", "unload a", "close"]


def test_a_backend_without_adapter_hooks_refuses_adapters_clearly(tmp_path: Path) -> None:
    class Plain:
        def compute_batch(self, requests: list[Request]) -> list[torch.Tensor]:
            raise AssertionError("not called")

    lm = BatchedAsyncLM(ByteTokenizer(), backend=Plain())
    with pytest.raises(LoraNotSupportedError):
        lm.add_new_lora(str(tmp_path), "a")
    lm.cleanup()


def test_thread_safety_and_context_length_come_from_the_backend() -> None:
    class Declared(HashRows):
        thread_safe = True
        max_positions = 5

    lm = model_over(Declared)
    assert lm.thread_safe and lm.max_positions == 5
    with pytest.raises(ValueError, match="5"):
        lm.next_token_logprobs_sync(list(range(6)))
    lm.cleanup()


def test_nothing_to_compute_with_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match=r"pass backend=.*or implement compute_batch"):
        BatchedAsyncLM(ByteTokenizer())
    with pytest.raises(TypeError, match="no compute_batch method"):
        BatchedAsyncLM(ByteTokenizer(), backend=object())
    with pytest.raises(TypeError, match="computes its own rows"):
        MockAsyncLM(ByteTokenizer(), backend=HashRows(4))

    class LoadsOnly:
        def compute_batch(self, requests: list[Request]) -> list[torch.Tensor]:
            return []

        def load_adapter(self, adapter: LoraAdapter) -> None:
            pass

    with pytest.raises(TypeError, match="only one of load_adapter and unload_adapter"):
        BatchedAsyncLM(ByteTokenizer(), backend=LoadsOnly())

    class ClosesBadly(HashRows):
        close = 3  # type: ignore[assignment]

    with pytest.raises(TypeError, match="backend.close must be a method"):
        BatchedAsyncLM(ByteTokenizer(), backend=ClosesBadly(4))


def test_backend_is_not_a_loader_option() -> None:
    assert "backend" not in (accepted_options(MockAsyncLM) or [])
    assert "batch_size" in (accepted_options(BatchedAsyncLM) or [])
